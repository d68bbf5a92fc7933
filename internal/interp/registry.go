// Package interp maps code block labels to interpreters: it loads the interpreter registry
// (interpreters.json, openai-contract.md §4.1), applies the --allowed-programs allow-list (§4.2), resolves
// every block of a request before anything runs (§4.3) and builds each block's environment (§7).
//
// Everything here is decided at startup or before a run starts, so every problem is reported as a precise
// error and nothing is guessed: a registry or flag that is not exactly right stops the server, and a block
// that cannot be resolved stops the request before any block has run.
package interp

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// EnvVar is one variable an interpreter entry (or the top-level "env", for every interpreter) adds to the
// child environment. IfExists (trip2g's registry shape) applies it only when that host path exists at
// load time, so a registry written for an image that bundles packages also loads where they are absent.
type EnvVar struct {
	Name     string `json:"name"`
	Value    string `json:"value"`
	IfExists string `json:"if_exists,omitempty"`
}

// Interpreter is one registry entry.
//
// A compiled language has Compile and Run, argv templates whose elements may contain the placeholders
// {src} (the entry file's absolute path), {stem} (its base name without the extension), {build} (a
// scratch directory for the build, never listed in files out) and {bin} ({build}/main). The program is
// Compile, then Run; Cmd[0] is still what enables the entry and names its version (Cmd + VersionArgs,
// default "--version"). Compiled languages run on the runner API only: the chat pipeline refuses them.
type Interpreter struct {
	Name        string   `json:"name"`
	Cmd         []string `json:"cmd"`
	Labels      []string `json:"code_block_labels"`
	Ext         string   `json:"ext"`
	Env         []EnvVar `json:"env,omitempty"`
	Compile     []string `json:"compile,omitempty"`
	Run         []string `json:"run,omitempty"`
	VersionArgs []string `json:"version_args,omitempty"`
}

func (in Interpreter) clone() Interpreter {
	in.Cmd = slices.Clone(in.Cmd)
	in.Labels = slices.Clone(in.Labels)
	in.Env = slices.Clone(in.Env)
	in.Compile = slices.Clone(in.Compile)
	in.Run = slices.Clone(in.Run)
	in.VersionArgs = slices.Clone(in.VersionArgs)
	return in
}

// Compiled reports whether the entry has a compile step.
func (in Interpreter) Compiled() bool { return len(in.Compile) > 0 }

// Tools lists the programs an entry needs besides Cmd[0]: the first element of Compile and of Run when
// they name a program rather than a placeholder.
func (in Interpreter) Tools() []string {
	var out []string
	for _, argv := range [][]string{in.Compile, in.Run} {
		if len(argv) > 0 && !strings.Contains(argv[0], "{") && argv[0] != in.Cmd[0] && !slices.Contains(out, argv[0]) {
			out = append(out, argv[0])
		}
	}
	return out
}

// Expand substitutes the placeholders of a Compile or Run template.
func Expand(argv []string, src, build string) []string {
	stem := filepath.Base(src)
	stem = strings.TrimSuffix(stem, filepath.Ext(stem))
	r := strings.NewReplacer("{src}", src, "{stem}", stem, "{build}", build, "{bin}", filepath.Join(build, "main"))
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = r.Replace(a)
	}
	return out
}

var placeholderRE = regexp.MustCompile(`\{[a-z]+\}`)

// checkTemplate validates a Compile or Run template: no NUL, known placeholders, and a first element
// that is a program name, an absolute path or (Run only) {bin}.
func checkTemplate(field string, argv []string, run bool) string {
	for k, a := range argv {
		if strings.IndexByte(a, 0) >= 0 {
			return fmt.Sprintf("%s[%d] contains a NUL byte", field, k)
		}
		for _, ph := range placeholderRE.FindAllString(a, -1) {
			if !slices.Contains([]string{"{src}", "{stem}", "{build}", "{bin}"}, ph) {
				return fmt.Sprintf("%s[%d]: unknown placeholder %s", field, k, ph)
			}
		}
	}
	c0 := argv[0]
	switch {
	case c0 == "{bin}" && run:
	case c0 == "" || strings.Contains(c0, "{"):
		return fmt.Sprintf("%s[0] %q must be a program name or an absolute path", field, c0)
	case !strings.HasPrefix(c0, "/") && strings.ContainsRune(c0, '/'):
		return fmt.Sprintf("%s[0] %q must be an absolute path or a program name looked up in PATH", field, c0)
	}
	return ""
}

// Registry is a validated set of interpreters. It is immutable after loading: accessors return copies, so
// one registry can be shared by every request.
type Registry struct {
	list    []Interpreter
	byName  map[string]int
	byLabel map[string]int
	labels  []string // sorted
}

// ErrInvalidRegistry is matched (errors.Is) by every *LoadError.
var ErrInvalidRegistry = errors.New("invalid interpreter registry")

// LoadError reports why a registry was rejected, naming the offending entry.
type LoadError struct {
	Path   string // file name for LoadFile, "" otherwise
	Entry  int    // 0-based index in "interpreters", -1 when the problem is not one entry's
	Name   string // the entry's name when known
	Reason string
	Err    error // underlying cause (e.g. the open error), if any
}

func (e *LoadError) Error() string {
	var b strings.Builder
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	if e.Entry >= 0 {
		b.WriteString(entryRef(e.Entry, e.Name))
		b.WriteString(": ")
	}
	b.WriteString(e.Reason)
	return b.String()
}

// Is makes errors.Is(err, ErrInvalidRegistry) hold.
func (e *LoadError) Is(target error) bool { return target == ErrInvalidRegistry }

// Unwrap exposes the underlying cause, such as fs.ErrNotExist for a missing file.
func (e *LoadError) Unwrap() error { return e.Err }

func entryRef(i int, name string) string {
	s := "interpreters[" + strconv.Itoa(i) + "]"
	if name != "" {
		s += " (" + strconv.Quote(name) + ")"
	}
	return s
}

//go:embed interpreters.json
var builtinJSON []byte

var builtin = sync.OnceValue(func() *Registry {
	r, err := Load(bytes.NewReader(builtinJSON))
	if err != nil {
		// The embedded file is part of the source tree and covered by tests; failing here is a build
		// defect, not a runtime condition.
		panic("interp: embedded interpreters.json: " + err.Error())
	}
	return r
})

// Builtin returns the registry embedded in the binary: fleet's six interpreters, without env.
func Builtin() *Registry { return builtin() }

// maxRegistryBytes bounds what Load reads; a real registry is a few kilobytes, so anything larger is a
// wrong file rather than a registry.
const maxRegistryBytes = 1 << 20

var (
	nameRE    = regexp.MustCompile(`^[a-z0-9_-]+$`)
	extRE     = regexp.MustCompile(`^\.[A-Za-z0-9]+$`)
	envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// LoadFile loads a registry from a file (--interpreters), replacing the built-in one entirely.
func LoadFile(path string) (*Registry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &LoadError{Path: path, Entry: -1, Reason: err.Error(), Err: err}
	}
	defer f.Close()
	r, err := Load(f)
	if le, ok := err.(*LoadError); ok {
		le.Path = path
	}
	return r, err
}

// Load reads and validates a registry strictly (§4.1): unknown or repeated fields, an empty list,
// duplicate names or labels, malformed names, labels, extensions, commands or env entries, and reserved
// env names are all errors naming the entry. A later entry never silently overrides an earlier one.
func Load(rd io.Reader) (*Registry, error) {
	data, err := io.ReadAll(io.LimitReader(rd, maxRegistryBytes+1))
	if err != nil {
		return nil, &LoadError{Entry: -1, Reason: "read: " + err.Error(), Err: err}
	}
	if len(data) > maxRegistryBytes {
		return nil, &LoadError{Entry: -1, Reason: fmt.Sprintf("larger than %d bytes", maxRegistryBytes)}
	}
	var top struct {
		Interpreters *[]json.RawMessage `json:"interpreters"`
		Env          []EnvVar           `json:"env"`
	}
	if err := decodeStrict(data, &top); err != nil {
		return nil, &LoadError{Entry: -1, Reason: err.Error()}
	}
	// Only now, on syntactically valid JSON within encoding/json's nesting limit, look for repeated or
	// mis-cased keys.
	if err := checkKeys(data); err != nil {
		// The decoded list may be a later duplicate of the one walked, so index it only when in range.
		if le, ok := err.(*LoadError); ok && le.Entry >= 0 && top.Interpreters != nil && le.Entry < len(*top.Interpreters) {
			le.Name = looseName((*top.Interpreters)[le.Entry])
		}
		return nil, err
	}
	if top.Interpreters == nil {
		return nil, &LoadError{Entry: -1, Reason: `missing "interpreters" list`}
	}
	if len(*top.Interpreters) == 0 {
		return nil, &LoadError{Entry: -1, Reason: `"interpreters" is empty`}
	}
	if reason := checkEnv(top.Env); reason != "" {
		return nil, &LoadError{Entry: -1, Reason: "top-level " + reason}
	}
	reg := &Registry{byName: map[string]int{}, byLabel: map[string]int{}}
	for i, raw := range *top.Interpreters {
		in, err := decodeEntry(i, raw)
		if err != nil {
			return nil, err
		}
		if err := reg.add(i, in); err != nil {
			return nil, err
		}
	}
	sort.Strings(reg.labels)
	reg.applyEnv(top.Env)
	return reg, nil
}

// applyEnv adds the top-level env to every entry that does not set the same name itself (the entry's own
// value wins), then drops every variable whose if_exists path is absent.
func (r *Registry) applyEnv(global []EnvVar) {
	for i := range r.list {
		in := &r.list[i]
		for _, g := range global {
			if !slices.ContainsFunc(in.Env, func(e EnvVar) bool { return e.Name == g.Name }) {
				in.Env = append(in.Env, g)
			}
		}
		in.Env = slices.DeleteFunc(in.Env, func(e EnvVar) bool {
			if e.IfExists == "" {
				return false
			}
			_, err := os.Stat(e.IfExists)
			return err != nil
		})
		for k := range in.Env {
			in.Env[k].IfExists = ""
		}
	}
}

// checkEnv validates env entries; "" when they are fine.
func checkEnv(env []EnvVar) string {
	seen := map[string]bool{}
	for _, e := range env {
		switch {
		case !envNameRE.MatchString(e.Name):
			return fmt.Sprintf("env name %q must match [A-Za-z_][A-Za-z0-9_]*", e.Name)
		case slices.Contains(Reserved, e.Name):
			return fmt.Sprintf("env name %s is reserved (set by codellm for every block)", e.Name)
		case seen[e.Name]:
			return fmt.Sprintf("env name %s is listed twice", e.Name)
		case strings.IndexByte(e.Value, 0) >= 0:
			return fmt.Sprintf("env %s value contains a NUL byte", e.Name)
		case e.IfExists != "" && !strings.HasPrefix(e.IfExists, "/"):
			return fmt.Sprintf("env %s if_exists %q must be an absolute path", e.Name, e.IfExists)
		}
		seen[e.Name] = true
	}
	return ""
}

// decodeStrict decodes exactly one JSON value, rejecting unknown fields and trailing data.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), "json: "))
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

func decodeEntry(i int, raw json.RawMessage) (Interpreter, error) {
	if !bytes.HasPrefix(bytes.TrimSpace(raw), []byte("{")) {
		return Interpreter{}, &LoadError{Entry: i, Reason: "entry is not an object"}
	}
	var in Interpreter
	if err := decodeStrict(raw, &in); err != nil {
		return Interpreter{}, &LoadError{Entry: i, Name: looseName(raw), Reason: err.Error()}
	}
	return in, nil
}

// looseName extracts an entry's name, if it has a usable one, so that errors about an otherwise broken
// entry can still name it.
func looseName(raw json.RawMessage) string {
	var named struct {
		Name string `json:"name"`
	}
	_ = json.Unmarshal(raw, &named)
	return named.Name
}

func (r *Registry) add(i int, in Interpreter) error {
	fail := func(format string, args ...any) error {
		return &LoadError{Entry: i, Name: in.Name, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case in.Name == "":
		return fail(`missing "name"`)
	case !nameRE.MatchString(in.Name):
		return fail("name %q must match [a-z0-9_-]+", in.Name)
	}
	if j, dup := r.byName[in.Name]; dup {
		return fail("name %q is already used by %s", in.Name, entryRef(j, in.Name))
	}
	if len(in.Cmd) == 0 {
		return fail(`"cmd" is empty`)
	}
	for k, arg := range in.Cmd {
		if strings.IndexByte(arg, 0) >= 0 {
			return fail("cmd[%d] contains a NUL byte", k)
		}
	}
	switch c0 := in.Cmd[0]; {
	case c0 == "":
		return fail("cmd[0] is empty")
	case !strings.HasPrefix(c0, "/") && strings.ContainsRune(c0, '/'):
		// A relative path would depend on the working directory, which is the block's throwaway workdir.
		return fail("cmd[0] %q must be an absolute path or a program name looked up in PATH", c0)
	}
	if len(in.Labels) == 0 {
		return fail(`"code_block_labels" is empty`)
	}
	for _, l := range in.Labels {
		switch {
		case l == "":
			return fail("empty label")
		case l != strings.ToLower(l):
			return fail("label %q is not lower-case", l)
		case strings.ContainsFunc(l, func(c rune) bool { return c <= ' ' || c == 0x7f }):
			// The label of a block is the first word of its info string, so such a label never matches.
			return fail("label %q contains whitespace or a control character", l)
		}
		if j, dup := r.byLabel[l]; dup {
			if j == i {
				return fail("label %q is listed twice", l)
			}
			return fail("label %q is already used by %s", l, entryRef(j, r.list[j].Name))
		}
		r.byLabel[l] = i
		r.labels = append(r.labels, l)
	}
	if (len(in.Compile) > 0) != (len(in.Run) > 0) {
		return fail(`"compile" and "run" go together`)
	}
	if len(in.Compile) > 0 {
		if msg := checkTemplate("compile", in.Compile, false); msg != "" {
			return fail("%s", msg)
		}
		if msg := checkTemplate("run", in.Run, true); msg != "" {
			return fail("%s", msg)
		}
	}
	for k, a := range in.VersionArgs {
		if strings.IndexByte(a, 0) >= 0 {
			return fail("version_args[%d] contains a NUL byte", k)
		}
	}
	if !extRE.MatchString(in.Ext) {
		return fail(`ext %q must be "." followed by [A-Za-z0-9]+`, in.Ext)
	}
	if reason := checkEnv(in.Env); reason != "" {
		return fail("%s", reason)
	}
	r.byName[in.Name] = i
	r.list = append(r.list, in.clone())
	return nil
}

// Interpreters returns a copy of the entries in file order.
func (r *Registry) Interpreters() []Interpreter {
	out := make([]Interpreter, len(r.list))
	for i, in := range r.list {
		out[i] = in.clone()
	}
	return out
}

// Lookup finds the interpreter for a code block label; the label is lower-cased first.
func (r *Registry) Lookup(label string) (*Interpreter, bool) {
	i, ok := r.byLabel[strings.ToLower(label)]
	if !ok {
		return nil, false
	}
	in := r.list[i].clone()
	return &in, true
}

// ByName finds an interpreter by canonical name.
func (r *Registry) ByName(name string) (*Interpreter, bool) {
	i, ok := r.byName[name]
	if !ok {
		return nil, false
	}
	in := r.list[i].clone()
	return &in, true
}

// Labels returns every registered label, sorted.
func (r *Registry) Labels() []string { return slices.Clone(r.labels) }

// Names returns every canonical name, sorted.
func (r *Registry) Names() []string {
	out := make([]string, 0, len(r.list))
	for _, in := range r.list {
		out = append(out, in.Name)
	}
	sort.Strings(out)
	return out
}

// Object kinds checkKeys knows the exact keys of.
type keyKind int

const (
	kindOther keyKind = iota
	kindTop
	kindList
	kindEntry
	kindEnvList
	kindEnv
)

var exactKeys = map[keyKind][]string{
	kindTop:   {"interpreters", "env"},
	kindEntry: {"name", "cmd", "code_block_labels", "ext", "env", "compile", "run", "version_args"},
	kindEnv:   {"name", "value", "if_exists"},
}

// checkKeys walks a syntactically valid document and rejects what encoding/json lets through silently:
// a key repeated in one object (the last value would win) and a key that matches a field only
// case-insensitively ("Cmd" would be read as "cmd"). Both hide exactly the operator mistakes strict
// loading exists for.
func checkKeys(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	errSyntax := errors.New("syntax") // stops the walk; never returned
	var walk func(path string, entry int, kind keyKind) error
	walk = func(path string, entry int, kind keyKind) error {
		tok, err := dec.Token()
		if err != nil {
			return errSyntax
		}
		delim, ok := tok.(json.Delim)
		if !ok {
			return nil
		}
		where := ""
		if entry < 0 || path != "$.interpreters["+strconv.Itoa(entry)+"]" {
			where = " in " + path
		}
		switch delim {
		case '{':
			seen := map[string]bool{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return errSyntax
				}
				key, _ := kt.(string)
				if allowed, checked := exactKeys[kind]; checked && !slices.Contains(allowed, key) {
					return &LoadError{Entry: entry, Reason: fmt.Sprintf("unknown field %q%s", key, where)}
				}
				if seen[key] {
					return &LoadError{Entry: entry, Reason: fmt.Sprintf("duplicate key %q%s", key, where)}
				}
				seen[key] = true
				child := kindOther
				switch {
				case kind == kindTop && key == "interpreters":
					child = kindList
				case kind == kindTop && key == "env":
					child = kindEnvList
				case kind == kindEntry && key == "env":
					child = kindEnvList
				}
				if err := walk(path+"."+key, entry, child); err != nil {
					return err
				}
			}
		case '[':
			for i := 0; dec.More(); i++ {
				childEntry, child := entry, kindOther
				switch kind {
				case kindList:
					childEntry, child = i, kindEntry
				case kindEnvList:
					child = kindEnv
				}
				if err := walk(path+"["+strconv.Itoa(i)+"]", childEntry, child); err != nil {
					return err
				}
			}
		}
		if _, err := dec.Token(); err != nil { // closing delimiter
			return errSyntax
		}
		return nil
	}
	if err := walk("$", -1, kindTop); err != nil && err != errSyntax {
		return err
	}
	return nil
}

// WithPathEnv returns a copy of r in which interpreter name also sets the path-list variable env to value;
// when the entry already sets env, the entry's value comes first and value is appended after a ':'. r is
// unchanged; an unknown name returns r. Used to put codellm's bundled modules on an interpreter's module
// path (fleetkit).
func (r *Registry) WithPathEnv(name, env, value string) *Registry {
	i, ok := r.byName[name]
	if !ok {
		return r
	}
	out := &Registry{list: make([]Interpreter, len(r.list)), byName: r.byName, byLabel: r.byLabel, labels: r.labels}
	for j, in := range r.list {
		out.list[j] = in.clone()
	}
	in := &out.list[i]
	for k := range in.Env {
		if in.Env[k].Name == env {
			if in.Env[k].Value != "" {
				value = in.Env[k].Value + ":" + value
			}
			in.Env[k].Value = value
			return out
		}
	}
	in.Env = append(in.Env, EnvVar{Name: env, Value: value})
	return out
}
