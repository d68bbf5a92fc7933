//go:build !codellm_trace || !linux

package hook

// Trace marks a step of the helper's path for the phase trace of a
// `-tags codellm_trace` build (see trace_on_linux.go and bench's trace row).
// In a normal build it is empty and inlined away.
func Trace(label string) {}
