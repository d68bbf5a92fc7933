package httpserve

import (
	"net/http"

	"github.com/codellm/codellm/internal/httpguard"
)

// Refuse answers a request internal/httpguard refused, in the surface's own error envelope.
type Refuse func(w http.ResponseWriter, r *http.Request, ref *httpguard.Refusal)

// Guard applies p's Host and Origin rules before h; requests exempt reports true for (nil: none) skip
// them.
func Guard(p *httpguard.Policy, exempt func(*http.Request) bool, refuse Refuse, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ref := p.Check(r); ref != nil && (exempt == nil || !exempt(r)) {
			refuse(w, r, ref)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// JSONBodies refuses a POST, PUT or PATCH whose body is not application/json before h (cross-site forms
// cannot send it without a preflight, and preflights are never granted). Put it after routing, so that
// unknown routes stay 404 and wrong methods 405.
func JSONBodies(refuse Refuse, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ref := httpguard.CheckContentType(r); ref != nil {
			refuse(w, r, ref)
			return
		}
		h.ServeHTTP(w, r)
	})
}
