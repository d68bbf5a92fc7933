// Package sealform is the sealing form trip2g's codellm serves (its PR #322), so that a role author can
// seal a credential without a terminal on the codellm host: GET renders a page, POST seals. One handler
// serves both of codellm's listeners at --seal-path (trip2g's CODELLM_SEAL_PATH, /_system/codellm/seal by
// default): the loopback step debugger's, and the main listener's behind its authentication (trip2g
// gates it with its own). The listener applies its Host, Origin and content-type rules first.
//
// POST takes JSON, {"env_key": "SEAL_KEY", "value": "…"}, and answers {"sealed": "sealed:v1:…"}: a
// cross-site HTML form cannot send JSON without a preflight, which is never granted, so a page the user
// visits cannot drive it (trip2g's form posts urlencoded fields behind its admin cookie; codellm has no
// browser login). The value travels in the body only, never in the URL; the reply never echoes it; a
// failure says nothing about the key beyond its variable's name, so the form is no oracle over the key's
// existence or length.
package sealform

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"

	"github.com/codellm/codellm/internal/openai"
	"github.com/codellm/codellm/internal/seal"
)

// DefaultPath is trip2g's path for the form, so that an operator's bookmark carries over.
const DefaultPath = "/_system/codellm/seal"

// maxBody bounds a POST: a secret is small.
const maxBody = 1 << 20

// reserved are the paths (and the trees below them) codellm's listeners serve themselves.
var reserved = []string{"/v1", "/api", "/sessions", "/debug", "/healthz", "/readyz", "/livez", "/metrics"}

// CheckPath validates a --seal-path: a clean absolute path of at least one segment that is neither one of
// codellm's own routes nor below one (the form would shadow it, or be shadowed), without mux wildcards.
func CheckPath(p string) error {
	if !strings.HasPrefix(p, "/") || p == "/" || path.Clean(p) != p || strings.ContainsAny(p, "{} \t?#%") {
		return fmt.Errorf("want a clean absolute path such as %s (no trailing slash, no {, }, ?, #, %% or spaces)", DefaultPath)
	}
	for _, r := range reserved {
		if p == r || strings.HasPrefix(p, r+"/") {
			return fmt.Errorf("%s is served by codellm itself (%s…); pick a path outside it", p, r)
		}
	}
	return nil
}

// Handler serves the form: GET and HEAD the page, POST the sealing. fail writes an error in the
// listener's way (its request log records the code); nil writes the OpenAI envelope.
func Handler(fail func(http.ResponseWriter, *http.Request, *openai.Error)) http.Handler {
	if fail == nil {
		fail = func(w http.ResponseWriter, _ *http.Request, e *openai.Error) { openai.WriteError(w, e) }
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		if r.URL.RawQuery != "" {
			fail(w, r, openai.NewError(http.StatusBadRequest, "invalid_request", "the value travels in the POST body, never in the URL"))
			return
		}
		if r.Method != http.MethodPost {
			page(w, r)
			return
		}
		envKey, value, e := decode(w, r)
		if e != nil {
			fail(w, r, e)
			return
		}
		blob, e := Seal(envKey, value, os.Getenv)
		if e != nil {
			fail(w, r, e)
			return
		}
		openai.WriteJSON(w, http.StatusOK, map[string]string{"sealed": blob})
	})
}

// Seal seals value with the key in the variable envKey ("": SEAL_KEY), as the form does: envKey must be
// SEAL_KEY or SEAL_KEY_<SUFFIX>, the browser's CRLFs become LF and trailing newlines are dropped (the
// form's, not the secret's, as `codellm seal` trims stdin's).
func Seal(envKey, value string, getenv func(string) string) (string, *openai.Error) {
	name := strings.TrimSpace(envKey)
	if name == "" {
		name = seal.DefaultKeyEnv
	}
	if !seal.KeyEnvAllowed(name) {
		return "", openai.NewError(http.StatusBadRequest, "invalid_request", "env_key must be %s or %s_<SUFFIX>",
			seal.DefaultKeyEnv, seal.DefaultKeyEnv)
	}
	plain := strings.TrimRight(strings.ReplaceAll(value, "\r\n", "\n"), "\n")
	if plain == "" {
		return "", openai.NewError(http.StatusBadRequest, "invalid_request", "value is required")
	}
	blob, err := seal.Seal(getenv(name), plain)
	if err != nil {
		return "", openai.NewError(http.StatusUnprocessableEntity, "seal_error", "seal failed: check that %s holds a 32-byte key", name)
	}
	return blob, nil
}

// decode reads the POST body: a JSON object with a string "value" and an optional string "env_key".
func decode(w http.ResponseWriter, r *http.Request) (envKey, value string, e *openai.Error) {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			return "", "", openai.NewError(http.StatusRequestEntityTooLarge, "request_too_large", "request body exceeds %d bytes", maxBody)
		}
		return "", "", openai.NewError(http.StatusBadRequest, "invalid_json", "cannot read request body: %v", err)
	}
	var req struct {
		EnvKey *string `json:"env_key"`
		Value  *string `json:"value"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return "", "", openai.NewError(http.StatusBadRequest, "invalid_json", "want a JSON object {\"env_key\": string, \"value\": string}: %v", err)
	}
	if dec.More() {
		return "", "", openai.NewError(http.StatusBadRequest, "invalid_json", "want one JSON object, got more after it")
	}
	if req.EnvKey != nil {
		envKey = *req.EnvKey
	}
	if req.Value != nil {
		value = *req.Value
	}
	return envKey, value, nil
}

// page writes the form. Its script posts JSON to the page's own path and never shows the plaintext back:
// echoing it would leave the secret in the DOM and the back-forward cache.
func page(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Content-Length", strconv.Itoa(len(pageHTML)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = io.WriteString(w, pageHTML)
	}
}

// csp allows only the page's own inline script and style and connections back to its origin.
const csp = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; " +
	"img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

const pageHTML = `<!doctype html>
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
