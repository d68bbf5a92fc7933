package debugger

import (
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/codellm/codellm/internal/openai"
	"github.com/codellm/codellm/internal/seal"
)

// SealPath is where the sealing form is served: trip2g's path, so an operator's bookmark carries over.
// trip2g serves it on its main listener behind its admin cookie; codellm has no browser login, so the form
// lives only here, on the unauthenticated-but-loopback debug listener, and never on the main one.
const SealPath = "/_system/codellm/seal"

// sealPage is the form. It posts JSON with fetch, because the debug surface accepts no other content type
// (a cross-site HTML form cannot send it), and it never shows the plaintext back: echoing it would leave
// the secret in the DOM and the back-forward cache.
const sealPage = `<!doctype html>
<meta charset="utf-8"><title>codellm seal</title>
<style>
body{font:14px/1.5 system-ui,sans-serif;max-width:44rem;margin:3rem auto;padding:0 1rem}
label{display:block;margin:1rem 0 .25rem;font-weight:600}
input,textarea,output{width:100%;box-sizing:border-box;font-family:ui-monospace,monospace;font-size:13px}
textarea{height:6rem}
output{display:block;word-break:break-all;background:#f4f4f5;padding:.75rem;border-radius:4px;min-height:1.5em}
.err{color:#b00020}
</style>
<h1>Seal a secret</h1>
<p>Paste the value, copy the result into the role note's frontmatter and list the field in <code>unseal</code>.</p>
<form id="f" autocomplete="off">
<label for="env_key">Key env var</label>
<input id="env_key" name="env_key" value="SEAL_KEY" spellcheck="false">
<label for="value">Value to seal</label>
<textarea id="value" name="value" spellcheck="false" autofocus></textarea>
<p><button type="submit">Seal</button></p>
</form>
<label>Sealed value</label><output id="out"></output><p id="err" class="err"></p>
<script>
document.getElementById('f').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const v = document.getElementById('value'), out = document.getElementById('out'), err = document.getElementById('err');
  out.textContent = ''; err.textContent = '';
  const r = await fetch(location.pathname, {method: 'POST', headers: {'Content-Type': 'application/json'},
    body: JSON.stringify({env_key: document.getElementById('env_key').value, value: v.value})});
  const j = await r.json();
  v.value = '';
  if (r.ok) out.textContent = j.sealed; else err.textContent = (j.error || {}).message || r.statusText;
});
</script>
`

// sealCSP is uiCSP: the page's own inline script and style, connections to its origin only.
const sealCSP = uiCSP

// handleSeal serves the form (GET) and seals (POST {"env_key": …, "value": …} → {"sealed": …}). The value
// travels in the body only: any query string is refused, since a secret in a URL lands in history and
// logs. Sealing failures say nothing about the key variable beyond its name, as trip2g's do.
func (d *Debugger) handleSeal(w http.ResponseWriter, r *http.Request, _ string) {
	if r.URL.RawQuery != "" {
		fail(w, openai.NewError(http.StatusBadRequest, "invalid_request", "the value travels in the POST body, never in the URL"))
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	if r.Method != http.MethodPost {
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Content-Security-Policy", sealCSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Content-Length", strconv.Itoa(len(sealPage)))
		w.WriteHeader(http.StatusOK)
		if r.Method != http.MethodHead {
			_, _ = w.Write([]byte(sealPage))
		}
		return
	}
	f, e := d.readObject(w, r, false, "env_key", "value")
	if e != nil {
		fail(w, e)
		return
	}
	envKey, _, e := f.bytesField("env_key")
	if e != nil {
		fail(w, e)
		return
	}
	value, _, e := f.bytesField("value")
	if e != nil {
		fail(w, e)
		return
	}
	name := strings.TrimSpace(string(envKey))
	if name == "" {
		name = seal.DefaultKeyEnv
	}
	if !seal.KeyEnvAllowed(name) {
		fail(w, openai.NewError(http.StatusBadRequest, "invalid_request", "env_key must be %s or %s_<SUFFIX>",
			seal.DefaultKeyEnv, seal.DefaultKeyEnv))
		return
	}
	// A browser posts a textarea's newlines as CRLF; the trailing newline is the form's, not the secret's.
	plain := strings.TrimRight(strings.ReplaceAll(string(value), "\r\n", "\n"), "\n")
	if plain == "" {
		fail(w, openai.NewError(http.StatusBadRequest, "invalid_request", "value is required"))
		return
	}
	blob, err := seal.Seal(os.Getenv(name), plain)
	if err != nil {
		fail(w, openai.NewError(http.StatusUnprocessableEntity, "seal_error",
			"seal failed: check that %s holds a 32-byte key", name))
		return
	}
	openai.WriteJSON(w, http.StatusOK, map[string]string{"sealed": blob})
}
