package bridge

import (
	"crypto/sha256"
	"encoding/hex"
)

// HeaderSessionOwner names, among a sandbox assignment's request.headers, the tenant on whose behalf the
// hub dispatched it, as an opaque digest (SessionOwner). A worker's runner counts sessions per owner: without
// it every hub tenant was the same in-process caller, so the per-credential session cap never applied and
// one tenant could fill the whole session table (issue 35 item 2). It is codellm's extension, set by the
// hub only; a worker takes it out of the headers and never forwards it to a runner over HTTP.
const HeaderSessionOwner = "X-Codellm-Session-Owner"

// SessionOwner is HeaderSessionOwner's value for a tenant.
func SessionOwner(tenantID string) string {
	h := sha256.Sum256([]byte("codellm-session-owner\x00tenant\x00" + tenantID))
	return "tenant:" + hex.EncodeToString(h[:8])
}
