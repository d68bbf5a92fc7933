package interp

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/codellm/codellm/internal/markdown"
)

// fixture builds a registry whose commands are real files in a temp dir: executable, not executable, a
// directory, a bare name missing from ChildPATH, and "sh" found in ChildPATH.
func fixture(t *testing.T) (*Registry, string) {
	t.Helper()
	dir := t.TempDir()
	write := func(name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\nexit 0\n"), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	alpha := write("alpha", 0o755)
	beta := write("beta", 0o700)
	gamma := write("gamma", 0o644)
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	js := `{"interpreters":[
		{"name":"alpha","cmd":["` + alpha + `","-x"],"code_block_labels":["a","alpha"],"ext":".a"},
		{"name":"beta","cmd":["` + beta + `"],"code_block_labels":["b"],"ext":".b"},
		{"name":"gamma","cmd":["` + gamma + `"],"code_block_labels":["g"],"ext":".g"},
		{"name":"delta","cmd":["codellm-missing-program-7f3a"],"code_block_labels":["d"],"ext":".d"},
		{"name":"dirprog","cmd":["` + sub + `"],"code_block_labels":["dir"],"ext":".x"},
		{"name":"shell","cmd":["sh"],"code_block_labels":["shell"],"ext":".sh"}]}`
	r, err := Load(strings.NewReader(js))
	if err != nil {
		t.Fatal(err)
	}
	return r, dir
}

func TestParseAllowed(t *testing.T) {
	cases := []struct {
		flag string
		set  bool
		want []string
	}{
		{"", false, nil},
		{"python", false, nil},
		{"", true, []string{}},
		{"  ", true, []string{}},
		{"python", true, []string{"python"}},
		{"python, bash", true, []string{"python", "bash"}},
		{"python,,bash,", true, []string{"python", "", "bash", ""}},
	}
	for _, c := range cases {
		got := ParseAllowed(c.flag, c.set)
		if !reflect.DeepEqual(got, c.want) || (got == nil) != (c.want == nil) {
			t.Fatalf("ParseAllowed(%q, %v) = %#v, want %#v", c.flag, c.set, got, c.want)
		}
	}
}

func TestEnableAbsent(t *testing.T) {
	r, dir := fixture(t)
	p, err := Enable(r, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Disabled() {
		t.Fatal("disabled")
	}
	if got := p.Names(); !reflect.DeepEqual(got, []string{"alpha", "beta", "shell"}) {
		t.Fatalf("enabled %q", got)
	}
	if got := p.Skipped(); !reflect.DeepEqual(got, []string{"delta", "dirprog", "gamma"}) {
		t.Fatalf("skipped %q", got)
	}
	if got := p.Path("alpha"); got != filepath.Join(dir, "alpha") {
		t.Fatalf("alpha path %q", got)
	}
	sh := p.Path("shell")
	if !slices.Contains(filepath.SplitList(ChildPATH), filepath.Dir(sh)) || filepath.Base(sh) != "sh" {
		t.Fatalf("sh resolved to %q, not within %s", sh, ChildPATH)
	}
	if p.Path("gamma") != "" || p.Path("nope") != "" {
		t.Fatal("path of a disabled program")
	}
}

func TestEnableBuiltinAbsentFindsBash(t *testing.T) {
	p, err := Enable(Builtin(), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(p.Names(), "bash") || !filepath.IsAbs(p.Path("bash")) {
		t.Fatalf("bash not enabled: %q", p.Names())
	}
	// Every registered program is either enabled or reported as skipped.
	all := append(p.Names(), p.Skipped()...)
	slices.Sort(all)
	if !reflect.DeepEqual(all, Builtin().Names()) {
		t.Fatalf("enabled+skipped = %q", all)
	}
}

func TestEnableList(t *testing.T) {
	r, dir := fixture(t)
	p, err := Enable(r, []string{"shell", "alpha", "alpha"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Names(); !reflect.DeepEqual(got, []string{"alpha", "shell"}) {
		t.Fatalf("enabled %q", got)
	}
	if p.Path("alpha") != filepath.Join(dir, "alpha") || p.Path("beta") != "" || len(p.Skipped()) != 0 {
		t.Fatalf("paths: alpha %q beta %q", p.Path("alpha"), p.Path("beta"))
	}
}

func TestEnableEmptyDisables(t *testing.T) {
	r, _ := fixture(t)
	p, err := Enable(r, ParseAllowed("", true), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Disabled() || len(p.Names()) != 0 {
		t.Fatalf("disabled %v names %q", p.Disabled(), p.Names())
	}
}

func TestEnableErrors(t *testing.T) {
	r, _ := fixture(t)
	cases := []struct {
		allowed []string
		want    string
	}{
		{[]string{"a"}, `invalid --allowed-programs: "a" is a code block label, not a program name (use "alpha")`},
		{[]string{"alpha", "B"}, `invalid --allowed-programs: "B" is a code block label, not a program name (use "beta")`},
		{[]string{"zeta"}, `invalid --allowed-programs: unknown program "zeta" (registered: alpha, beta, delta, dirprog, gamma, shell)`},
		{[]string{"Alpha"}, `"Alpha" is a code block label, not a program name (use "alpha")`},
		{[]string{"Shell2"}, `unknown program "Shell2"`},
		{[]string{"alpha", "", "beta"}, `invalid --allowed-programs: empty program name in "alpha,,beta"`},
		{[]string{"alpha", "gamma"}, `invalid --allowed-programs: program "gamma": cmd[0] does not resolve: `},
		{[]string{"delta"}, `invalid --allowed-programs: program "delta": cmd[0] does not resolve: "codellm-missing-program-7f3a": executable not found in /usr/local/bin:/usr/bin:/bin`},
		{[]string{"dirprog"}, `program "dirprog": cmd[0] does not resolve`},
	}
	for _, c := range cases {
		p, err := Enable(r, c.allowed, nil)
		if p != nil || err == nil || !errors.Is(err, ErrInvalidAllowed) || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("Enable(%q) = %v, %v; want error containing %q", c.allowed, p, err, c.want)
		}
	}
	if _, err := Enable(r, []string{"gamma"}, nil); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unresolvable program error %v does not wrap ErrNotFound", err)
	}
}

// TestLookPathIgnoresOwnPATH is differential: a program only on codellm's own PATH is found by
// exec.LookPath but not by LookPath, which searches the child's fixed PATH.
func TestLookPathIgnoresOwnPATH(t *testing.T) {
	dir := t.TempDir()
	const name = "codellm-only-on-test-path"
	if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	if p, err := exec.LookPath(name); err != nil || p != filepath.Join(dir, name) {
		t.Fatalf("control: exec.LookPath = %q, %v", p, err)
	}
	if p, err := LookPath(name); err == nil || !errors.Is(err, ErrNotFound) {
		t.Fatalf("LookPath found %q via codellm's PATH", p)
	}
	if p, err := LookPath(filepath.Join(dir, name)); err != nil || p != filepath.Join(dir, name) {
		t.Fatalf("absolute: %q, %v", p, err)
	}
	for _, bad := range []string{"", "./" + name, "sub/" + name} {
		if p, err := LookPath(bad); err == nil {
			t.Fatalf("LookPath(%q) = %q", bad, p)
		}
	}
}

// TestEnableUsesGivenLookPath: the resolver decides what is enabled and the path it returns is kept.
func TestEnableUsesGivenLookPath(t *testing.T) {
	look := func(cmd0 string) (string, error) {
		if cmd0 == "python3" || cmd0 == "bash" {
			return "/opt/test/" + cmd0, nil
		}
		return "", ErrNotFound
	}
	p, err := Enable(Builtin(), nil, look)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p.Names(), []string{"bash", "python"}) || p.Path("python") != "/opt/test/python3" {
		t.Fatalf("names %q path %q", p.Names(), p.Path("python"))
	}
	if _, err := Enable(Builtin(), []string{"ruby"}, look); err == nil {
		t.Fatal("unresolvable listed program accepted")
	}
}

func fakeLook(cmd0 string) (string, error) { return "/usr/bin/" + cmd0, nil }

func blocks(t *testing.T, body string) []markdown.Block {
	t.Helper()
	b, err := markdown.Extract([]markdown.Source{{Message: 0, Text: body}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestResolveMessages(t *testing.T) {
	const supported = "bash, c, c++, cc, cpp, cxx, d, f90, f95, fortran, go, golang, java, javascript, js, node, perl, php, pl, py, python, python3, r, rb, rs, rscript, ruby, rust, sh, ts, typescript"
	bashPython, err := Enable(Builtin(), []string{"bash", "python"}, fakeLook)
	if err != nil {
		t.Fatal(err)
	}
	disabled, err := Enable(Builtin(), []string{}, fakeLook)
	if err != nil {
		t.Fatal(err)
	}
	none, err := Enable(Builtin(), nil, func(string) (string, error) { return "", ErrNotFound })
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		p     *Programs
		body  string
		code  string
		block int
		msg   string
		is    error
	}{
		{"disabled", disabled, "```bash\ntrue\n```\n", CodeExecutionDisabled, -1,
			"code execution is disabled (--allowed-programs is empty)", ErrExecutionDisabled},
		{"disabled without blocks", disabled, "", CodeExecutionDisabled, -1,
			"code execution is disabled (--allowed-programs is empty)", ErrExecutionDisabled},
		{"no language", bashPython, "```sh\ntrue\n```\n```\necho\n```\n", CodeUnknownLanguage, 1,
			"code block 2 has no language", ErrUnknownLanguage},
		{"unknown language third", bashPython, "```bash\ntrue\n```\n```py\npass\n```\n```kotlin\nfun main() {}\n```\n", CodeUnknownLanguage, 2,
			`code block 3: language "kotlin" is not supported (supported: ` + supported + `)`, ErrUnknownLanguage},
		{"odd label quoted", bashPython, "```\"x\ty\n```\n", CodeUnknownLanguage, 0,
			`code block 1: language "\"x" is not supported (supported: ` + supported + `)`, ErrUnknownLanguage},
		{"not allowed", bashPython, "```rb\nputs 1\n```\n", CodeProgramNotAllowed, 0,
			`code block 1: program "ruby" is not allowed (allowed: bash, python)`, ErrProgramNotAllowed},
		// Not installed is not "not allowed": no --allowed-programs left it out, the host lacks it.
		{"nothing installed", none, "```sh\ntrue\n```\n", CodeProgramNotInstalled, 0,
			`code block 1: program "bash" is not installed on this host ("bash" is not in ` + ChildPATH + `; installed: none)`, ErrProgramNotInstalled},
		{"first problem wins", bashPython, "```perl\n1\n```\n```\n```\n", CodeProgramNotAllowed, 0,
			`code block 1: program "perl" is not allowed (allowed: bash, python)`, ErrProgramNotAllowed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := c.p.Resolve(blocks(t, c.body))
			var re *ResolveError
			if res != nil || !errors.As(err, &re) {
				t.Fatalf("Resolve = %+v, %v", res, err)
			}
			if re.Code != c.code || re.Block != c.block || re.Message != c.msg || err.Error() != c.msg {
				t.Fatalf("got %+v\nwant code %s block %d message %s", *re, c.code, c.block, c.msg)
			}
			for _, s := range []error{ErrExecutionDisabled, ErrUnknownLanguage, ErrProgramNotAllowed, ErrProgramNotInstalled} {
				if errors.Is(err, s) != (s == c.is) {
					t.Fatalf("errors.Is(%v, %v) wrong", err, s)
				}
			}
		})
	}
}

func TestResolveSuccess(t *testing.T) {
	p, err := Enable(Builtin(), []string{"bash", "python"}, fakeLook)
	if err != nil {
		t.Fatal(err)
	}
	bl := blocks(t, "x\n```Bash\necho 1\n```\n~~~python3 title=a.py\nprint(2)\n~~~\n")
	res, err := p.Resolve(bl)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || res[0].Block != bl[0] || res[1].Block != bl[1] {
		t.Fatalf("%+v", res)
	}
	if res[0].Interp.Name != "bash" || res[0].Path != "/usr/bin/bash" || res[0].Interp.Ext != ".sh" {
		t.Fatalf("%+v", res[0])
	}
	if res[1].Interp.Name != "python" || res[1].Path != "/usr/bin/python3" || !reflect.DeepEqual(res[1].Interp.Cmd, []string{"python3"}) {
		t.Fatalf("%+v", res[1])
	}
	// Mutating a result does not reach the registry.
	res[1].Interp.Cmd[0] = "evil"
	if in, _ := Builtin().Lookup("py"); in.Cmd[0] != "python3" {
		t.Fatal("registry mutated through Resolved")
	}
	// A hand-built block with an upper-case label still resolves.
	one, err := p.ResolveOne(markdown.Block{Index: 4, Label: "PY"})
	if err != nil || one.Interp.Name != "python" {
		t.Fatalf("%+v %v", one, err)
	}
	if res, err := p.Resolve(nil); err != nil || len(res) != 0 {
		t.Fatalf("no blocks: %+v %v", res, err)
	}
}

// TestResolveOne classifies each block on its own, as the debugger lists them.
func TestResolveOne(t *testing.T) {
	p, err := Enable(Builtin(), []string{"bash"}, fakeLook)
	if err != nil {
		t.Fatal(err)
	}
	bl := blocks(t, "```kotlin\n```\n```sh\necho\n```\n```\n```\n```ruby\n```\n")
	wantCodes := []string{CodeUnknownLanguage, "", CodeUnknownLanguage, CodeProgramNotAllowed}
	wantMsgs := []string{
		`code block 1: language "kotlin" is not supported (supported: bash, c, c++, cc, cpp, cxx, d, f90, f95, fortran, go, golang, java, javascript, js, node, perl, php, pl, py, python, python3, r, rb, rs, rscript, ruby, rust, sh, ts, typescript)`,
		"",
		"code block 3 has no language",
		`code block 4: program "ruby" is not allowed (allowed: bash)`,
	}
	for i, b := range bl {
		res, err := p.ResolveOne(b)
		if wantCodes[i] == "" {
			if err != nil || res.Interp.Name != "bash" {
				t.Fatalf("block %d: %+v %v", i, res, err)
			}
			continue
		}
		var re *ResolveError
		if !errors.As(err, &re) || re.Code != wantCodes[i] || re.Message != wantMsgs[i] || re.Block != i {
			t.Fatalf("block %d: %+v", i, err)
		}
	}
	d, _ := Enable(Builtin(), []string{}, fakeLook)
	if _, err := d.ResolveOne(bl[1]); !errors.Is(err, ErrExecutionDisabled) {
		t.Fatalf("disabled ResolveOne: %v", err)
	}
}
