// Command summary reads `go test -json` on stdin and prints what a person needs from a long suite: each
// package's result line, the whole output of every test that failed, build errors — and at the end how
// many tests passed, failed and were skipped, with the skipped ones counted by reason. A suite that is
// green while half of it skipped says so.
//
//	go test -json ./... | go run ./test/summary [--allow FILE]
//
// With --allow, every skip whose reason matches none of FILE's patterns (one regular expression a line;
// blank lines and lines starting with # are comments) is listed and the exit status is 1: CI, where every
// tool is installed, allows only the skips it names. The exit status is also 1 when a test or a build
// failed, or when the input holds no test at all.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
)

func main() {
	allow := flag.String("allow", "", "file of regular expressions: the skip reasons allowed (CI)")
	flag.Parse()
	var patterns []*regexp.Regexp
	if *allow != "" {
		var err error
		if patterns, err = readPatterns(*allow); err != nil {
			fmt.Fprintln(os.Stderr, "summary:", err)
			os.Exit(2)
		}
	}
	s := newSuite(os.Stdout)
	if err := s.read(os.Stdin); err != nil {
		fmt.Fprintln(os.Stderr, "summary:", err)
		os.Exit(2)
	}
	os.Exit(s.report(os.Stdout, patterns))
}

// event is one line of `go test -json` (cmd/test2json), and the build events of `go test -json`.
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string // build-output, build-fail
}

// skip is one skipped test and the reason it gave.
type skip struct{ pkg, test, reason string }

// suite is what has been read so far.
type suite struct {
	out     io.Writer
	tests   map[string][]string // package + test → its output lines, until it ends
	pkgOut  map[string][]string // package → its output outside any test
	passed  int
	failed  []string
	skipped []skip
	pkgFail int
}

func newSuite(out io.Writer) *suite {
	return &suite{out: out, tests: map[string][]string{}, pkgOut: map[string][]string{}}
}

// read consumes the event stream, printing as packages and tests end. Lines that are not JSON (go
// vet's, a crashed binary's) are printed as they come.
func (s *suite) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			fmt.Fprintln(s.out, sc.Text())
			continue
		}
		s.handle(e)
	}
	return sc.Err()
}

func (s *suite) handle(e event) {
	key := e.Package + " " + e.Test
	switch {
	case e.Action == "build-output":
		fmt.Fprint(s.out, e.Output)
	case e.Action == "build-fail":
		s.pkgFail++
	case e.Action == "output" && e.Test != "":
		s.tests[key] = append(s.tests[key], e.Output)
	case e.Action == "output":
		s.pkgOut[e.Package] = append(s.pkgOut[e.Package], e.Output)
	case e.Test != "" && (e.Action == "pass" || e.Action == "fail" || e.Action == "skip"):
		s.testEnded(e, s.tests[key])
		delete(s.tests, key)
	case e.Action == "pass" || e.Action == "fail" || e.Action == "skip":
		s.packageEnded(e)
	}
}

func (s *suite) testEnded(e event, lines []string) {
	switch e.Action {
	case "pass":
		s.passed++
	case "fail":
		s.failed = append(s.failed, e.Package+" "+e.Test)
		fmt.Fprint(s.out, strings.Join(lines, ""))
	case "skip":
		s.skipped = append(s.skipped, skip{e.Package, e.Test, skipReason(lines)})
	}
}

// packageEnded prints the package's result line, and on failure everything it printed outside tests (a
// panic, a TestMain's complaint).
func (s *suite) packageEnded(e event) {
	lines := s.pkgOut[e.Package]
	delete(s.pkgOut, e.Package)
	if e.Action == "fail" {
		s.pkgFail++
		fmt.Fprint(s.out, strings.Join(lines, ""))
		return
	}
	for i := len(lines) - 1; i >= 0; i-- {
		if l := lines[i]; strings.HasPrefix(l, "ok ") || strings.HasPrefix(l, "?") || strings.HasPrefix(l, "ok\t") {
			fmt.Fprint(s.out, l)
			return
		}
	}
}

var logLine = regexp.MustCompile(`^\s+[\w.-]+\.go:\d+: (.*)$`)

// skipReason is the message a skipped test logged last (the t.Skip text), without its file:line.
func skipReason(lines []string) string {
	reason := ""
	for _, l := range lines {
		if m := logLine.FindStringSubmatch(strings.TrimRight(l, "\n")); m != nil {
			reason = strings.TrimSpace(m[1])
		}
	}
	if reason == "" {
		return "(no reason given)"
	}
	return reason
}

// report prints the totals and the skips by reason, and returns the exit status.
func (s *suite) report(w io.Writer, allowed []*regexp.Regexp) int {
	fmt.Fprintf(w, "\n%d passed, %d failed, %d skipped", s.passed, len(s.failed), len(s.skipped))
	if s.pkgFail > 0 {
		fmt.Fprintf(w, "; %d package(s) failed", s.pkgFail)
	}
	fmt.Fprintln(w)
	var refused []string
	for _, r := range byReason(s.skipped) {
		fmt.Fprintf(w, "  %4d skipped: %s (%s)\n", len(r.tests), r.reason, examples(r.tests))
		if allowed != nil && !matchesAny(allowed, r.reason) {
			refused = append(refused, r.reason)
		}
	}
	for _, f := range s.failed {
		fmt.Fprintf(w, "FAIL: %s\n", f)
	}
	if len(refused) > 0 {
		fmt.Fprintf(w, "\n%d skip reason(s) are not on the allow-list; on this machine these tests must run:\n", len(refused))
		for _, r := range refused {
			fmt.Fprintf(w, "  %s\n", r)
		}
	}
	switch {
	case len(s.failed) > 0 || s.pkgFail > 0 || len(refused) > 0:
		return 1
	case s.passed+len(s.skipped) == 0:
		fmt.Fprintln(w, "no test ran")
		return 1
	}
	return 0
}

// reasonGroup is the tests that skipped for one reason.
type reasonGroup struct {
	reason string
	tests  []string
}

// byReason groups skips by reason, the largest group first.
func byReason(skips []skip) []reasonGroup {
	idx := map[string]int{}
	var out []reasonGroup
	for _, s := range skips {
		i, ok := idx[s.reason]
		if !ok {
			i = len(out)
			idx[s.reason] = i
			out = append(out, reasonGroup{reason: s.reason})
		}
		out[i].tests = append(out[i].tests, shortPkg(s.pkg)+"."+s.test)
	}
	sort.SliceStable(out, func(i, j int) bool { return len(out[i].tests) > len(out[j].tests) })
	return out
}

// examples names up to three of the tests, and how many more.
func examples(tests []string) string {
	if len(tests) <= 3 {
		return strings.Join(tests, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(tests[:3], ", "), len(tests)-3)
}

func shortPkg(p string) string {
	if i := strings.Index(p, "/internal/"); i >= 0 {
		return p[i+1:]
	}
	return p[strings.LastIndex(p, "/")+1:]
}

func matchesAny(res []*regexp.Regexp, s string) bool {
	for _, re := range res {
		if re.MatchString(s) {
			return true
		}
	}
	return false
}

// readPatterns reads an allow-list: one regular expression a line, # comments and blank lines ignored.
func readPatterns(path string) ([]*regexp.Regexp, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := []*regexp.Regexp{}
	for i, l := range strings.Split(string(raw), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		re, err := regexp.Compile(l)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %v", path, i+1, err)
		}
		out = append(out, re)
	}
	return out, nil
}
