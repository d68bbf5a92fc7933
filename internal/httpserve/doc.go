// Package httpserve is the HTTP scaffolding every codellm listener shares (the main service, the step
// debugger and the bridge hub), so that routing, authentication, request ids and the shutdown sequence
// are each written once:
//
//   - Router: the standard library's method+path patterns ("GET /v1/models", "/v1/files/{id}") on an
//     http.ServeMux, with each surface's own 404 and 405 bodies (the mux's text/plain ones are never
//     sent) and no redirects: a path that is not clean, or a subtree's root without its slash, is not
//     found rather than redirected.
//   - Auth and Bearer: the credential middleware and the one Authorization: Bearer parser, compared in
//     constant time; each surface keeps its own refusal (status, body, WWW-Authenticate).
//   - RequestID: X-Request-Id on every response (the client's own when safe to echo).
//   - Serve: the listener limits and request hygiene of internal/httpguard around one graceful
//     shutdown: stop accepting, let in-flight requests finish within a grace, then cancel their runs and
//     close what is left.
//
// The worker and the workspace tools serve no HTTP (the worker connects out to the hub), so they do not
// use this package.
package httpserve
