//go:build !codellm_trace || !linux

package sandbox

// Trace marks a step of a request's path for the phase trace of a
// `-tags codellm_trace` build (see trace_on.go and bench's trace row). In a
// normal build it is empty and inlined away.
func Trace(label string) {}
