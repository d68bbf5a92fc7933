//go:build cgo

package main

// cgoBuild: this binary was built with cgo. syscall.AllThreadsSyscall does not exist in such a build, so a
// block's init could not drop its capabilities on every thread (internal/sandbox/hook, threat-model row
// 7i): the native sandbox refuses to run (newSandbox) and doctor says why.
const cgoBuild = true

func cgoNote() string { return ", cgo: the native sandbox refuses; build with CGO_ENABLED=0" }
