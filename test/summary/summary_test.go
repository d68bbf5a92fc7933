package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The fixture's real `go test -json`: the failing test's output is printed whole, the passing ones' is
// not, the skips are counted by reason, and the allow-list decides the exit status.
func TestSummary(t *testing.T) {
	cmd := exec.Command("go", "test", "-json", "-count=1", ".")
	cmd.Dir = filepath.Join("testdata", "fixture")
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	raw, _ := cmd.Output() // exits 1: TestFails
	s := newSuite(&bytes.Buffer{})
	var out bytes.Buffer
	s.out = &out
	if err := s.read(bytes.NewReader(raw)); err != nil {
		t.Fatal(err)
	}
	code := s.report(&out, nil)
	got := out.String()
	for _, want := range []string{
		"the detail a person needs", "boom", "FAIL: fixture TestFails",
		"3 passed, 1 failed, 4 skipped",
		"     3 skipped: redis-server not installed (fixture.TestNoRedis, fixture.TestNoRedisEither, fixture.TestSubtests/b)",
		"     1 skipped: chromium is not installed (fixture.TestNoChromium)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
	if code != 1 || strings.Contains(got, "=== RUN   TestPasses") || strings.Contains(got, "looking for chromium") {
		t.Errorf("exit %d; passing or skipped tests' output printed:\n%s", code, got)
	}

	// The allow-list: only the chromium skip is allowed, so the redis one is listed and the exit is 1
	// even without the failure; allowing both gives 0.
	noFail := &suite{passed: 1, skipped: s.skipped}
	out.Reset()
	if code := noFail.report(&out, []*regexp.Regexp{regexp.MustCompile(`^chromium`)}); code != 1 ||
		!strings.Contains(out.String(), "not on the allow-list") || !strings.Contains(out.String(), "\n  redis-server not installed\n") {
		t.Errorf("allow-list without redis: exit %d\n%s", code, out.String())
	}
	out.Reset()
	if code := noFail.report(&out, []*regexp.Regexp{regexp.MustCompile(`^chromium`), regexp.MustCompile(`^redis-server`)}); code != 0 {
		t.Errorf("allow-list with both: exit %d\n%s", code, out.String())
	}
}

// A build error and a package that failed outside its tests are shown, and fail the summary.
func TestBuildAndPackageFailures(t *testing.T) {
	var out bytes.Buffer
	s := newSuite(&out)
	in := `{"ImportPath":"x/broken","Action":"build-output","Output":"# x/broken\nbroken.go:3:1: syntax error\n"}
{"ImportPath":"x/broken","Action":"build-fail"}
{"Action":"output","Package":"x/panics","Output":"panic: in TestMain\n"}
{"Action":"fail","Package":"x/panics"}
not json: go vet's line
`
	if err := s.read(strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	code := s.report(&out, nil)
	for _, want := range []string{"broken.go:3:1: syntax error", "panic: in TestMain", "not json: go vet's line", "2 package(s) failed"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("lacks %q:\n%s", want, out.String())
		}
	}
	if code != 1 {
		t.Errorf("exit %d", code)
	}
}
