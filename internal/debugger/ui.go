package debugger

import (
	_ "embed"
	"net/http"
	"strconv"
)

// uiPage is the step UI (§14.4): one self-contained page, embedded so the binary needs no build step and
// the page loads nothing from elsewhere.
//
//go:embed ui/index.html
var uiPage []byte

// uiCSP allows only the page's own inline script and style and connections back to its origin, so a
// rendered stdout can never load or send anything elsewhere.
const uiCSP = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; " +
	"img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

func (d *Debugger) handleUI(w http.ResponseWriter, r *http.Request, _ string) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", uiCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(uiPage)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(uiPage)
	}
}
