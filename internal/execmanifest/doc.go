// Package execmanifest verifies the Code API's signed execution manifests: the capability a real
// LibreChat Code API deployment (its service worker) signs with Ed25519 for every sandbox execution and
// that the sandbox checks before it fetches a by-reference input or uploads a generated file through the
// worker's file relay.
//
// A manifest travels as `base64url(payload) "." base64url(signature)` in the execute body's
// "execution_manifest" member or the X-CodeAPI-Execution-Manifest header. The payload is the claims'
// canonical JSON (keys sorted, no whitespace); anything else — a re-ordered or padded payload, an extra
// dot, a key that is not Ed25519 — is refused, so exactly the bytes that were signed are the bytes that
// are trusted. A verified manifest is then bound to the request it arrived with: its output session,
// its input file set, its read sessions and the SHA-256 of the whole request body (less the manifest
// itself) must all match, so a manifest can never authorise another execution's files.
//
// Verification fails closed: a missing manifest, a missing key, a bad signature, an expired or not yet
// valid manifest, or a body it does not describe is an *Error naming its reason, with the HTTP status
// the Code API's sandbox answers for it.
package execmanifest
