package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// version is set at build time with -ldflags "-X main.version=…" (make build, make release); init fills
// it from the build information otherwise.
var version = ""

func init() { version = versionOf(version, debug.ReadBuildInfo) }

// versionOf is the stamped version, else what the Go toolchain recorded: the module version of
// `go install …@v1.2.3` (or its pseudo-version), else the commit of a checkout's `go build`
// (with "+dirty" for uncommitted changes), else "dev".
func versionOf(stamped string, info func() (*debug.BuildInfo, bool)) string {
	if stamped != "" {
		return stamped
	}
	bi, ok := info()
	if !ok {
		return "dev"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch {
		case s.Key == "vcs.revision" && len(s.Value) >= 12:
			rev = s.Value[:12]
		case s.Key == "vcs.modified" && s.Value == "true":
			dirty = "+dirty"
		}
	}
	if rev == "" {
		return "dev"
	}
	return "dev-" + rev + dirty
}

// cmdVersion prints the version, and the platform and toolchain it was built for.
func cmdVersion(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintf(stdout, "codellm %s (%s/%s, %s%s)\n", version, runtime.GOOS, runtime.GOARCH, runtime.Version(), cgoNote())
	return 0
}
