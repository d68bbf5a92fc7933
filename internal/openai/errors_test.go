package openai

import (
	"net/http/httptest"
	"strconv"
	"testing"
)

func TestErrorEnvelope(t *testing.T) {
	tests := []struct {
		err    *Error
		typ    string
		body   string
		header map[string]string
	}{
		{NewError(400, "invalid_json", `field %q must be a boolean or null, got %s`, "stream", "string"), "invalid_request_error",
			`{"error":{"message":"field \"stream\" must be a boolean or null, got string","type":"invalid_request_error","param":null,"code":"invalid_json"}}`, nil},
		{NewError(401, "invalid_api_key", "invalid API key").WithHeader("WWW-Authenticate", "Bearer"), "authentication_error",
			`{"error":{"message":"invalid API key","type":"authentication_error","param":null,"code":"invalid_api_key"}}`,
			map[string]string{"WWW-Authenticate": "Bearer"}},
		{NewError(404, "not_found", "no route for GET /v2"), "invalid_request_error", "", nil},
		{NewError(405, "method_not_allowed", "use POST").WithHeader("Allow", "POST"), "invalid_request_error", "", map[string]string{"Allow": "POST"}},
		{NewError(413, "request_too_large", "body over 10485760 bytes"), "invalid_request_error", "", nil},
		{NewError(422, "nonzero_exit", "block 2/3: non-zero exit (code 1): boom"), "code_execution_error",
			`{"error":{"message":"block 2/3: non-zero exit (code 1): boom","type":"code_execution_error","param":null,"code":"nonzero_exit"}}`, nil},
		{NewError(429, "concurrency_limit", "all 4 run slots are busy").WithHeader("Retry-After", "5"), "rate_limit_error", "",
			map[string]string{"Retry-After": "5"}},
		{NewError(500, "internal_error", "internal error"), "api_error", "", nil},
		{NewError(503, "shutting_down", "codellm is shutting down"), "api_error", "", nil},
		{NewError(422, "bad_output", "%s", `bad output: stdout is not a single JSON value (got: "100%s <b>")`), "code_execution_error",
			`{"error":{"message":"bad output: stdout is not a single JSON value (got: \"100%s <b>\")","type":"code_execution_error","param":null,"code":"bad_output"}}`, nil},
	}
	for _, tc := range tests {
		t.Run(tc.err.Code, func(t *testing.T) {
			if tc.err.Type() != tc.typ {
				t.Errorf("Type() = %q, want %q", tc.err.Type(), tc.typ)
			}
			rec := httptest.NewRecorder()
			WriteError(rec, tc.err)
			if rec.Code != tc.err.Status || rec.Header().Get("Content-Type") != "application/json" {
				t.Errorf("status %d, content type %q", rec.Code, rec.Header().Get("Content-Type"))
			}
			if cl := rec.Header().Get("Content-Length"); cl != strconv.Itoa(rec.Body.Len()) {
				t.Errorf("Content-Length %s for %d bytes", cl, rec.Body.Len())
			}
			body := string(parseBack(t, rec.Body.Bytes()))
			if tc.body != "" && body != tc.body {
				t.Errorf("body\n  %s\nwant\n  %s", body, tc.body)
			}
			want := `{"error":{"message":` + string(marshal(tc.err.Message)) + `,"type":"` + tc.typ + `","param":null,"code":"` + tc.err.Code + `"}}`
			if body != want {
				t.Errorf("body\n  %s\nwant\n  %s", body, want)
			}
			for k, v := range tc.header {
				if rec.Header().Get(k) != v {
					t.Errorf("header %s = %q, want %q", k, rec.Header().Get(k), v)
				}
			}
		})
	}
}

// parseBack strips the trailing newline WriteError adds.
func parseBack(t *testing.T, b []byte) []byte {
	t.Helper()
	if len(b) == 0 || b[len(b)-1] != '\n' {
		t.Fatalf("body %q does not end in a newline", b)
	}
	return b[:len(b)-1]
}
