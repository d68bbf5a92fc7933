// Package layering holds codellm's dependency rules as a test (in the style of tailscale's deptest): which
// packages must never be linked into which. It has no code; `go test ./internal/layering` checks the rules
// with `go list -deps`, so a violating import fails CI instead of growing unnoticed.
package layering
