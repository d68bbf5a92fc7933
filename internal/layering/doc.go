// Package layering holds codellm's repository-wide rules as tests (in the style of tailscale's deptest):
// which packages must never be linked into which (`go list -deps`), that no function outside tests is
// longer than 80 lines (a go/ast walk, with an explicit allow-list of the ones still being split), and
// that no HTTP server, mux or shutdown is written outside internal/httpserve. It has
// no code; `go test ./internal/layering` checks the rules, so a violation fails CI instead of growing
// unnoticed.
package layering
