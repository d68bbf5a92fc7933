package httpserve

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestBearer(t *testing.T) {
	for _, c := range []struct {
		header, tok string
		ok          bool
	}{
		{"Bearer k", "k", true},
		{"bearer k", "k", true},
		{"BEARER  k", "k", true},
		{"Bearer", "", false},
		{"Basic k", "", false},
		{"Bearerk", "", false},
		{"", "", false},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		if c.header != "" {
			r.Header.Set("Authorization", c.header)
		}
		tok, ok := Bearer(r)
		if tok != c.tok || ok != c.ok {
			t.Errorf("Bearer(%q) = %q %v, want %q %v", c.header, tok, ok, c.tok, c.ok)
		}
	}
}

func TestAuth(t *testing.T) {
	h := Auth(BearerKey("secret"), func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(401) },
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) }))
	for header, want := range map[string]int{"Bearer secret": 204, "Bearer secreT": 401, "Bearer ": 401, "": 401, "secret": 401} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Authorization", header)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != want {
			t.Errorf("Authorization %q: %d, want %d", header, rec.Code, want)
		}
	}
	if !BearerKey("")(httptest.NewRequest("GET", "/", nil)) {
		t.Error("an empty key must accept every request")
	}
	if Equal("", "") {
		t.Error("an empty configured secret must match nothing")
	}
}

func TestRequestID(t *testing.T) {
	var seen string
	h := WithRequestID(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen = RequestIDOf(r) }))
	for client, echoed := range map[string]bool{"abc-1.2:3_x": true, "": false, "a b": false, "x\r\ny": false} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header["X-Request-Id"] = []string{client}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		got := rec.Header().Get("X-Request-Id")
		if got != seen || (got == client) != echoed || (!echoed && len(got) != len("req_")+32) {
			t.Errorf("client id %q: response %q, handler saw %q", client, got, seen)
		}
	}
}
