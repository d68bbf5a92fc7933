package debugger_test

import (
	"strings"
	"testing"

	"github.com/codellm/codellm/internal/debugger"
	"github.com/codellm/codellm/internal/seal"
	"github.com/codellm/codellm/internal/sealform"
)

// fleet's debug client sends its struct with every field at its zero value: an empty role (the body is
// inline), block 0 — or no block at all — empty stdin and a null input.
func TestFleetDebugRequestShapes(t *testing.T) {
	s := startDebugger(t, envOpts{})
	two := block("bash", "echo first") + block("bash", "echo second")
	for _, req := range []any{
		`{"role":"","body":` + jsonString(two) + `,"block":0,"stdin":"","input":null}`,
		`{"role":"","body":` + jsonString(two) + `,"stdin":"","input":null}`,
		`{"body":` + jsonString(two) + `}`,
		`{"role":null,"body":` + jsonString(two) + `,"block":null}`,
	} {
		r := s.do(t, "POST", "/debug/run-block", req)
		if m := r.obj(t); r.Status != 200 || m["stdout"] != "first\n" || m["ok"] != true {
			t.Fatalf("%s: %d %s", req, r.Status, r.Body)
		}
	}
	r := s.do(t, "POST", "/debug/run-block", `{"role":"","body":`+jsonString(two)+`,"block":1,"stdin":"","input":null}`)
	if m := r.obj(t); r.Status != 200 || m["stdout"] != "second\n" {
		t.Fatalf("block 1: %s", r.Body)
	}
	// input null is no bag ({}), not the JSON text "null".
	r = s.do(t, "POST", "/debug/run-block", `{"role":"","body":`+jsonString(block("bash", `cat "$FLEET_INPUT"`))+`,"input":null}`)
	if m := r.obj(t); m["stdout"] != "{}" {
		t.Fatalf("input null: %s", r.Body)
	}
	r = s.do(t, "POST", "/debug/sessions", `{"role":"","body":`+jsonString(two)+`,"input":null}`)
	wantStatus(t, r, 201)
	// A real role name is still a lookup codellm cannot do.
	wantError(t, s.do(t, "POST", "/debug/run-block", `{"role":"indexer","body":"x","block":0}`), 400, "role_lookup_unsupported", "")
	wantError(t, s.do(t, "POST", "/debug/sessions", `{"role":"indexer"}`), 400, "role_lookup_unsupported", "")
}

const sealKey = "12345678901234567890123456789012"

func TestSealForm(t *testing.T) {
	t.Setenv("SEAL_KEY", sealKey)
	t.Setenv("SEAL_KEY_SHORT", "too-short")
	s := startDebugger(t, envOpts{})
	r := s.do(t, "GET", sealform.DefaultPath, nil)
	wantStatus(t, r, 200)
	if !strings.Contains(string(r.Body), `name="value"`) || r.Header.Get("Cache-Control") != "no-store" ||
		strings.Contains(string(r.Body), seal.Prefix) {
		t.Fatalf("form: %v %s", r.Header, r.Body)
	}

	r = s.do(t, "POST", sealform.DefaultPath, map[string]any{"env_key": "", "value": "line1\r\nline2\r\n"})
	m := r.obj(t)
	got, err := seal.Open(sealKey, m["sealed"].(string))
	if err != nil || got != "line1\nline2" {
		t.Fatalf("sealed %v: %q %v", m, got, err)
	}
	if strings.Contains(string(r.Body), "line1") {
		t.Fatal("the reply echoes the plaintext")
	}

	// The value travels in a JSON body only: a query string or a cross-site form post is refused.
	wantError(t, s.do(t, "POST", sealform.DefaultPath+"?value=s3cret", map[string]any{"value": "v"}), 400, "invalid_request", "never in the URL")
	wantError(t, s.do(t, "POST", sealform.DefaultPath, "value=v", "Content-Type", "application/x-www-form-urlencoded"),
		415, "unsupported_media_type", "")
	wantError(t, s.do(t, "POST", sealform.DefaultPath, map[string]any{"value": ""}), 400, "invalid_request", "required")
	// An absent and a short key fail alike: the form is no oracle over the key's existence or length.
	var msgs []string
	for _, key := range []string{"SEAL_KEY_ABSENT", "SEAL_KEY_SHORT"} {
		r := s.do(t, "POST", sealform.DefaultPath, map[string]any{"env_key": key, "value": "v"})
		wantError(t, r, 422, "seal_error", "32-byte key")
		msgs = append(msgs, strings.ReplaceAll(string(r.Body), key, "K"))
	}
	if msgs[0] != msgs[1] || strings.Contains(msgs[1], "too-short") {
		t.Fatalf("absent and short keys are distinguishable: %q", msgs)
	}
	wantError(t, s.do(t, "POST", sealform.DefaultPath, map[string]any{"env_key": "CODELLM_API_KEY", "value": "v"}), 400, "invalid_request", "SEAL_KEY")
	wantError(t, s.do(t, "GET", sealform.DefaultPath, nil, "Host", "evil.example"), 403, "bad_host", "")

	// --seal-path moves it (trip2g's CODELLM_SEAL_PATH); the default path is then free.
	moved := startDebugger(t, envOpts{sealPath: "/ops/seal"})
	wantStatus(t, moved.do(t, "GET", "/ops/seal", nil), 200)
	r = moved.do(t, "POST", "/ops/seal", map[string]any{"value": "v"})
	if got, err := seal.Open(sealKey, r.obj(t)["sealed"].(string)); err != nil || got != "v" {
		t.Fatalf("moved form: %q %v", got, err)
	}
	wantError(t, moved.do(t, "GET", sealform.DefaultPath, nil), 404, "not_found", "")
	if _, err := debugger.New(debugger.Config{Engine: s.eng, SealPath: "/debug/seal"}); err == nil ||
		!strings.Contains(err.Error(), "--seal-path") {
		t.Fatalf("a seal path under the debugger's own routes: %v", err)
	}
}
