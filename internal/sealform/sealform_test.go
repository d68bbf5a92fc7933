package sealform

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/codellm/codellm/internal/seal"
)

func TestCheckPath(t *testing.T) {
	for p, want := range map[string]string{
		DefaultPath: "", "/ops/seal": "", "/s": "",
		"": "clean absolute path", "seal": "clean absolute path", "/": "clean absolute path", "/ops/seal/": "clean absolute path",
		"/ops//seal": "clean absolute path", "/ops/../seal": "clean absolute path", "/ops/{id}": "clean absolute path",
		"/ops/seal?x": "clean absolute path", "/ops seal": "clean absolute path",
		"/v1": "served by codellm", "/v1/seal": "served by codellm", "/api/v2/seal": "served by codellm",
		"/debug/seal": "served by codellm", "/metrics": "served by codellm", "/healthz/x": "served by codellm",
		"/sessions/seal": "served by codellm", "/v1seal": "",
	} {
		err := CheckPath(p)
		if (want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), want) {
			t.Errorf("CheckPath(%q) = %v, want %q", p, err, want)
		}
	}
}

// The POST body is one JSON object of two known string fields; anything else is refused before sealing.
func TestPostBody(t *testing.T) {
	t.Setenv("SEAL_KEY", "12345678901234567890123456789012")
	h := Handler(nil)
	for body, want := range map[string]string{
		`{"value":"v"}`:                      "sealed:v1:",
		`{"env_key":"SEAL_KEY","value":"v"}`: "sealed:v1:",
		`{"value":"v","extra":1}`:            `unknown field \"extra\"`,
		`{"value":1}`:                        "invalid_json",
		`{"value":"v"} {"value":"w"}`:        "one JSON object",
		``:                                   "invalid_json",
		`{}`:                                 "value is required",
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, DefaultPath, strings.NewReader(body)))
		if !strings.Contains(rec.Body.String(), want) || rec.Header().Get("Cache-Control") != "no-store" {
			t.Errorf("POST %s: %d %s, want %q", body, rec.Code, rec.Body, want)
		}
	}
	blob, e := Seal("", "a\r\nb\n\n", func(string) string { return "12345678901234567890123456789012" })
	if got, err := seal.Open("12345678901234567890123456789012", blob); e != nil || err != nil || got != "a\nb" {
		t.Fatalf("Seal: %q %v %v", got, e, err)
	}
}
