//go:build !cgo

package main

// cgoBuild: this binary was built with CGO_ENABLED=0, as make build and the release binaries are (cgo.go
// says why it matters).
const cgoBuild = false

func cgoNote() string { return ", static" }
