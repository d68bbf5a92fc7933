package layering

import (
	"strings"
	"testing"
)

// Package wire holds the terms every surface shares and sits below all of them: it may import the standard
// library only, so that any package (the execution core, the bridge, the sandbox's users) can use it
// without a cycle or a heavier link.
func TestWireImportsOnlyTheStandardLibrary(t *testing.T) {
	for p := range deps(t, "../../internal/wire") {
		if strings.Contains(strings.Split(p, "/")[0], ".") && p != mod+"internal/wire" {
			t.Errorf("package wire depends on %s", p)
		}
	}
}
