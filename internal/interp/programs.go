package interp

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/codellm/codellm/internal/markdown"
)

// ChildPATH is the fixed PATH of every block (§7). Interpreters are resolved against it, not against
// codellm's own PATH, so that what the startup check finds is what a block will run.
const ChildPATH = "/usr/local/bin:/usr/bin:/bin"

// ErrInvalidAllowed is wrapped by every --allowed-programs error from Enable.
var ErrInvalidAllowed = errors.New("invalid --allowed-programs")

// ErrNotFound is wrapped by LookPath when a program does not resolve to an executable file.
var ErrNotFound = errors.New("executable not found")

// Programs is the enabled set of interpreters after applying --allowed-programs. It is immutable.
type Programs struct {
	reg      *Registry
	disabled bool
	paths    map[string]string // enabled name → absolute cmd[0]
	names    []string          // sorted enabled names
	skipped  []string          // registered names not enabled because cmd[0] did not resolve (flag absent)
}

// ParseAllowed turns the --allowed-programs flag into Enable's argument: nil when the flag is absent, an
// empty non-nil slice when it is set to nothing (execution disabled), otherwise the comma-separated items
// with surrounding spaces removed. Empty items are kept so that Enable can reject them precisely.
func ParseAllowed(flag string, set bool) []string {
	if !set {
		return nil
	}
	flag = strings.TrimSpace(flag)
	if flag == "" {
		return []string{}
	}
	items := strings.Split(flag, ",")
	for i := range items {
		items[i] = strings.TrimSpace(items[i])
	}
	return items
}

// LookPath resolves a cmd[0] the way a block's exec will: an absolute path must name an executable
// regular file; a bare name is searched in ChildPATH. The result is absolute and not symlink-resolved.
func LookPath(file string) (string, error) {
	if filepath.IsAbs(file) {
		if err := checkExecutable(file); err != nil {
			return "", err
		}
		return file, nil
	}
	if file == "" || strings.ContainsRune(file, '/') {
		return "", fmt.Errorf("%q: %w (must be absolute or a bare program name)", file, ErrNotFound)
	}
	for _, dir := range filepath.SplitList(ChildPATH) {
		p := filepath.Join(dir, file)
		if checkExecutable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%q: %w in %s", file, ErrNotFound, ChildPATH)
}

func checkExecutable(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("%q: %w", p, ErrNotFound)
	}
	if m := st.Mode(); !m.IsRegular() || m&0o111 == 0 {
		return fmt.Errorf("%q: %w (not an executable regular file: %v)", p, ErrNotFound, fs.FileMode(m))
	}
	return nil
}

// Enable applies --allowed-programs (§4.2) to a registry.
//
//   - allowed == nil (flag absent): every interpreter whose cmd[0] resolves is enabled.
//   - allowed empty, non-nil: execution is disabled; Resolve fails every request.
//   - otherwise exactly the listed canonical names; a label, an unknown or empty name, or a listed program
//     whose cmd[0] does not resolve is an error (repeated names are harmless and counted once).
//
// lookPath resolves cmd[0]; nil means LookPath.
func Enable(r *Registry, allowed []string, lookPath func(string) (string, error)) (*Programs, error) {
	if r == nil {
		return nil, fmt.Errorf("%w: no registry", ErrInvalidAllowed)
	}
	if lookPath == nil {
		lookPath = LookPath
	}
	p := &Programs{reg: r, paths: map[string]string{}}
	switch {
	case allowed == nil:
		for _, in := range r.list {
			path, err := lookPath(in.Cmd[0])
			if err == nil {
				err = toolsResolve(in, lookPath)
			}
			if err != nil {
				p.skipped = append(p.skipped, in.Name)
				continue
			}
			p.paths[in.Name] = path
		}
		sort.Strings(p.skipped)
	case len(allowed) == 0:
		p.disabled = true
	default:
		for _, name := range allowed {
			if name == "" {
				return nil, fmt.Errorf("%w: empty program name in %q", ErrInvalidAllowed, strings.Join(allowed, ","))
			}
			if _, done := p.paths[name]; done {
				continue
			}
			i, ok := r.byName[name]
			if !ok {
				if j, isLabel := r.byLabel[strings.ToLower(name)]; isLabel {
					return nil, fmt.Errorf("%w: %q is a code block label, not a program name (use %q)",
						ErrInvalidAllowed, name, r.list[j].Name)
				}
				return nil, fmt.Errorf("%w: unknown program %q (registered: %s)",
					ErrInvalidAllowed, name, strings.Join(r.Names(), ", "))
			}
			path, err := lookPath(r.list[i].Cmd[0])
			if err != nil {
				return nil, fmt.Errorf("%w: program %q: cmd[0] does not resolve: %w", ErrInvalidAllowed, name, err)
			}
			if err := toolsResolve(r.list[i], lookPath); err != nil {
				return nil, fmt.Errorf("%w: program %q: %w", ErrInvalidAllowed, name, err)
			}
			p.paths[name] = path
		}
	}
	for name := range p.paths {
		p.names = append(p.names, name)
	}
	sort.Strings(p.names)
	return p, nil
}

// toolsResolve checks that the programs a compiled entry needs besides cmd[0] are installed.
func toolsResolve(in Interpreter, lookPath func(string) (string, error)) error {
	for _, t := range in.Tools() {
		if _, err := lookPath(t); err != nil {
			return fmt.Errorf("%s does not resolve: %w", t, err)
		}
	}
	return nil
}

// installed lists the enabled programs a block may name, for a message ("none" for none): the compiled
// ones are left out, ResolveOne refuses them.
func (p *Programs) installed() string {
	var out []string
	for _, n := range p.names {
		if i, ok := p.reg.byName[n]; !ok || !p.reg.list[i].Compiled() {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

// Names returns the enabled canonical names, sorted.
func (p *Programs) Names() []string { return slices.Clone(p.names) }

// Skipped returns, when --allowed-programs was absent, the registered names left disabled because their
// cmd[0] does not resolve (for the startup log).
func (p *Programs) Skipped() []string { return slices.Clone(p.skipped) }

// Disabled reports whether execution is disabled (--allowed-programs set to nothing).
func (p *Programs) Disabled() bool { return p.disabled }

// Path returns the resolved absolute path of an enabled program's cmd[0], or "" if it is not enabled.
func (p *Programs) Path(name string) string { return p.paths[name] }

// Registry returns the registry the set was built from.
func (p *Programs) Registry() *Registry { return p.reg }

// Resolution error codes (§4.3); they are also the API error codes of the 422 replies.
const (
	CodeExecutionDisabled = "execution_disabled"
	CodeUnknownLanguage   = "unknown_language"
	CodeProgramNotAllowed = "program_not_allowed"
	// CodeProgramNotInstalled: the program is registered and no --allowed-programs left it out, but it is
	// not on this host (cmd[0] or a tool it needs does not resolve in ChildPATH).
	CodeProgramNotInstalled = "program_not_installed"
)

// Sentinels matched by *ResolveError according to its Code.
var (
	ErrExecutionDisabled   = errors.New(CodeExecutionDisabled)
	ErrUnknownLanguage     = errors.New(CodeUnknownLanguage)
	ErrProgramNotAllowed   = errors.New(CodeProgramNotAllowed)
	ErrProgramNotInstalled = errors.New(CodeProgramNotInstalled)
)

// ResolveError is why a block cannot run. Message is the exact client-facing text of §4.3.
type ResolveError struct {
	Code    string
	Message string
	Block   int // 0-based block index, -1 when not about one block
}

func (e *ResolveError) Error() string { return e.Message }

// Is matches the sentinel for e.Code.
func (e *ResolveError) Is(target error) bool {
	switch target {
	case ErrExecutionDisabled:
		return e.Code == CodeExecutionDisabled
	case ErrUnknownLanguage:
		return e.Code == CodeUnknownLanguage
	case ErrProgramNotAllowed:
		return e.Code == CodeProgramNotAllowed
	case ErrProgramNotInstalled:
		return e.Code == CodeProgramNotInstalled
	}
	return false
}

// Resolved is one block ready to run.
type Resolved struct {
	Block  markdown.Block
	Interp Interpreter
	Path   string // absolute cmd[0]
}

// Resolve resolves every block in order and stops at the first problem (§4.3), so that a request whose
// third block is unusable never runs its first two.
func (p *Programs) Resolve(blocks []markdown.Block) ([]Resolved, error) {
	if p.disabled {
		return nil, disabledError()
	}
	out := make([]Resolved, 0, len(blocks))
	for _, b := range blocks {
		res, err := p.ResolveOne(b)
		if err != nil {
			return nil, err
		}
		out = append(out, res)
	}
	return out, nil
}

// ResolveOne classifies a single block (for the debugger, which lists every block with its own status).
// Block numbers in messages are b.Index+1.
func (p *Programs) ResolveOne(b markdown.Block) (Resolved, error) {
	if p.disabled {
		return Resolved{}, disabledError()
	}
	k := strconv.Itoa(b.Index + 1)
	if b.Label == "" {
		return Resolved{}, &ResolveError{Code: CodeUnknownLanguage, Block: b.Index,
			Message: "code block " + k + " has no language"}
	}
	i, ok := p.reg.byLabel[strings.ToLower(b.Label)]
	if !ok {
		return Resolved{}, &ResolveError{Code: CodeUnknownLanguage, Block: b.Index,
			Message: "code block " + k + ": language " + strconv.Quote(b.Label) +
				" is not supported (supported: " + strings.Join(p.reg.labels, ", ") + ")"}
	}
	in := p.reg.list[i]
	if in.Compiled() {
		return Resolved{}, &ResolveError{Code: CodeUnknownLanguage, Block: b.Index,
			Message: "code block " + k + ": language " + strconv.Quote(b.Label) +
				" needs a compile step, which only the runner API (/api/v2/execute) has"}
	}
	path, ok := p.paths[in.Name]
	if !ok && slices.Contains(p.skipped, in.Name) {
		return Resolved{}, &ResolveError{Code: CodeProgramNotInstalled, Block: b.Index,
			Message: "code block " + k + ": program " + strconv.Quote(in.Name) + " is not installed on this host (" +
				strconv.Quote(in.Cmd[0]) + " is not in " + ChildPATH + "; installed: " + p.installed() + ")"}
	}
	if !ok {
		return Resolved{}, &ResolveError{Code: CodeProgramNotAllowed, Block: b.Index,
			Message: "code block " + k + ": program " + strconv.Quote(in.Name) + " is not allowed (allowed: " + p.installed() + ")"}
	}
	return Resolved{Block: b, Interp: in.clone(), Path: path}, nil
}

func disabledError() *ResolveError {
	return &ResolveError{Code: CodeExecutionDisabled, Block: -1,
		Message: "code execution is disabled (--allowed-programs is empty)"}
}
