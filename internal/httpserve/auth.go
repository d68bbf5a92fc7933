package httpserve

import (
	"crypto/subtle"
	"net/http"
	"strings"
)

// Bearer extracts the token of "Authorization: Bearer <token>" (the scheme case-insensitive, one or more
// spaces after it, the token trimmed).
func Bearer(r *http.Request) (string, bool) {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(tok), true
}

// Equal compares a presented secret with the configured one in constant time; an empty secret on either
// side matches nothing.
func Equal(presented, configured string) bool {
	return presented != "" && configured != "" && subtle.ConstantTimeCompare([]byte(presented), []byte(configured)) == 1
}

// BearerKey accepts requests carrying "Authorization: Bearer <key>"; an empty key accepts every request
// (the listener is open, or mutual TLS already authenticated the client in the handshake).
func BearerKey(key string) func(*http.Request) bool {
	return func(r *http.Request) bool {
		if key == "" {
			return true
		}
		tok, ok := Bearer(r)
		return ok && Equal(tok, key)
	}
}

// Auth runs h for requests check accepts and answers the others with deny (the surface's own refusal).
func Auth(check func(*http.Request) bool, deny http.HandlerFunc, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !check(r) {
			deny(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}
