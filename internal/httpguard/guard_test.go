package httpguard

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// TestHostRule: a DNS-rebinding page reaches a loopback listener under its own name. Without the Host
// check the request passes (the attack); with it, it is 403 bad_host, while loopback names and an
// operator's names still pass.
func TestHostRule(t *testing.T) {
	rebind := httptest.NewRequest("GET", "/v1/models", nil)
	rebind.Host = "attacker.example:8080"
	if ref := (&Policy{}).Check(rebind); ref != nil {
		t.Fatalf("without the Host check the rebinding request should pass, got %+v", ref)
	}
	p := ForListener("127.0.0.1:8080", []string{"codellm.internal"}, nil)
	if ref := p.Check(rebind); ref == nil || ref.Status != 403 || ref.Code != "bad_host" || !strings.Contains(ref.Message, "attacker.example") {
		t.Fatalf("rebinding Host: got %+v, want 403 bad_host", ref)
	}
	for host, want := range map[string]bool{
		"127.0.0.1:8080": true, "localhost": true, "LOCALHOST:1": true, "[::1]:8080": true, "127.9.9.9": true,
		"codellm.internal:8080": true, "CODELLM.internal.": true,
		"": false, "localhost.attacker.example": false, "0.0.0.0:8080": false, "10.0.0.1": false,
		"codellm.internal.attacker.example": false,
	} {
		if got := p.HostAllowed(host); got != want {
			t.Errorf("HostAllowed(%q) = %v, want %v", host, got, want)
		}
	}
	if ForListener("0.0.0.0:8080", nil, nil).CheckHost {
		t.Error("a public listener without --allowed-hosts must not check Host (its names are unknown)")
	}
	if !ForListener("0.0.0.0:8080", []string{"x"}, nil).CheckHost {
		t.Error("listing --allowed-hosts must switch the Host check on")
	}
}

// TestOriginRule: a page on another origin posting to the service is refused (403 bad_origin); the
// service's own origin, requests without Origin (every non-browser client) and configured origins pass.
func TestOriginRule(t *testing.T) {
	p := ForListener("127.0.0.1:8080", nil, []string{"https://app.example"})
	cases := []struct {
		origin string
		host   string
		ok     bool
	}{
		{"http://attacker.example", "127.0.0.1:8080", false},
		{"http://localhost:3000", "127.0.0.1:8080", false}, // another local app is another origin
		{"http://127.0.0.1:3000", "127.0.0.1:8080", false},
		{"null", "127.0.0.1:8080", false},
		{"file://", "127.0.0.1:8080", false},
		{"http://127.0.0.1:8080", "127.0.0.1:8080", true},
		{"http://LOCALHOST:8080", "localhost:8080", true},
		{"http://[::1]:8080", "[::1]:8080", true},
		{"http://localhost", "localhost:80", true},
		{"https://app.example", "127.0.0.1:8080", true},
	}
	for _, c := range cases {
		r := httptest.NewRequest("POST", "/v1/chat/completions", nil)
		r.Host = c.host
		r.Header.Set("Origin", c.origin)
		ref := p.Check(r)
		if (ref == nil) != c.ok {
			t.Errorf("Origin %q Host %q: refusal %+v, want ok=%v", c.origin, c.host, ref, c.ok)
		}
		if ref != nil && (ref.Status != 403 || ref.Code != "bad_origin") {
			t.Errorf("Origin %q: %+v, want 403 bad_origin", c.origin, ref)
		}
	}
	r := httptest.NewRequest("POST", "/v1/chat/completions", nil)
	r.Host = "127.0.0.1:8080"
	if ref := p.Check(r); ref != nil {
		t.Errorf("no Origin (a non-browser client): %+v", ref)
	}
}

// TestContentTypeRule: the CORS-simple content types a cross-site form or fetch can send without a
// preflight are refused with 415; application/json (with parameters) passes; GET is not concerned.
func TestContentTypeRule(t *testing.T) {
	for ct, ok := range map[string]bool{
		"application/json": true, "application/json; charset=utf-8": true, "Application/JSON": true,
		"": false, "text/plain": false, "application/x-www-form-urlencoded": false,
		"multipart/form-data; boundary=x": false, "application/jsonx": false, "application/json; =": false,
	} {
		r := httptest.NewRequest("POST", "/", strings.NewReader("{}"))
		if ct != "" {
			r.Header.Set("Content-Type", ct)
		}
		ref := CheckContentType(r)
		if (ref == nil) != ok {
			t.Errorf("Content-Type %q: %+v, want ok=%v", ct, ref, ok)
		}
		if ref != nil && (ref.Status != 415 || ref.Code != "unsupported_media_type") {
			t.Errorf("Content-Type %q: %+v", ct, ref)
		}
	}
	if ref := CheckContentType(httptest.NewRequest("GET", "/", nil)); ref != nil {
		t.Errorf("GET: %+v", ref)
	}
	// A POST without a body and without a content type (the SDKs' responses.cancel) carries nothing to
	// check; a body-less form post still names its type and is refused.
	if ref := CheckContentType(httptest.NewRequest("POST", "/", nil)); ref != nil {
		t.Errorf("body-less POST: %+v", ref)
	}
	form := httptest.NewRequest("POST", "/", nil)
	form.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if ref := CheckContentType(form); ref == nil {
		t.Error("body-less form POST passed")
	}
}
