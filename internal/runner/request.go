package runner

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/codellm/codellm/internal/sandbox"
	"github.com/codellm/codellm/internal/wire"
)

// File is one entry of ExecuteRequest.Files. Exactly one of Content or ID (+ StorageSessionID) is set;
// file references to a storage service are not supported by this runner and are rejected with 400.
type File struct {
	Name             string  `json:"name,omitempty"`
	Content          *string `json:"content,omitempty"`
	Encoding         string  `json:"encoding,omitempty"` // utf8 (default) | base64 | hex
	ID               string  `json:"id,omitempty"`
	StorageSessionID string  `json:"storage_session_id,omitempty"`
	EntityID         string  `json:"entity_id,omitempty"`
	InputCacheKey    string  `json:"input_cache_key,omitempty"`
}

// ExecuteRequest is the body of POST /api/v2/execute (runner API §11.5). Times are milliseconds, memory
// is bytes (−1 = the server's maximum). Unknown members are ignored, as Piston does.
type ExecuteRequest struct {
	Language           string            `json:"language"`
	Version            string            `json:"version"`
	Files              []File            `json:"files"`
	Stdin              *string           `json:"stdin,omitempty"`
	Args               []string          `json:"args,omitempty"`
	RunTimeout         *float64          `json:"run_timeout,omitempty"` // ms; fractional and 0 accepted, as Piston
	CompileTimeout     *float64          `json:"compile_timeout,omitempty"`
	RunCPUTime         *float64          `json:"run_cpu_time,omitempty"`
	CompileCPUTime     *float64          `json:"compile_cpu_time,omitempty"`
	RunMemoryLimit     *int64            `json:"run_memory_limit,omitempty"`
	CompileMemoryLimit *int64            `json:"compile_memory_limit,omitempty"`
	EnvVars            map[string]string `json:"env_vars,omitempty"`
	SessionID          string            `json:"session_id,omitempty"`        // storage session; accepted, unused
	OutputSessionID    string            `json:"output_session_id,omitempty"` // storage session; accepted, unused
	// Metadata carries codellm's deterministic-mode fields, as on the chat routes: "deterministic"
	// ("true"/"false"), "seed", "now" (RFC 3339 or Unix seconds). Other members are ignored.
	Metadata map[string]json.RawMessage `json:"metadata,omitempty"`
}

// prepared is a validated request: everything an execute needs, decided before any slot or session is
// taken, so that invalid requests never queue and never touch a workspace.
type prepared struct {
	rt      Runtime
	files   []decodedFile // files[0] is the entry point
	stdin   []byte
	args    []string
	env     []string // request env_vars as NAME=value, sorted
	timeout time.Duration
	memory  int64
	cpu     time.Duration // 0 = none

	compileTimeout time.Duration // the compile stage's limits (compiled languages only)
	compileMemory  int64
	compileCPU     time.Duration

	det *sandbox.Determinism // deterministic mode (nil: off), both stages

	netAllow *[]string // metadata.network_allow, checked narrower (nil: the operator's list), both stages
}

type decodedFile struct {
	name string // clean, slash-separated, relative
	data []byte
}

var (
	envKeyRE   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`) // any case, as LibreChat's runner
	cacheKeyRE = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// minMemory is the sandbox's lower bound for a memory limit; asking for less is a client error, not a
// sandbox failure.
const minMemory = 4 << 20

func (r *Runner) prepare(req *ExecuteRequest) (*prepared, *Error) {
	if req.Language == "" {
		return nil, badRequest("language is required")
	}
	if req.Version == "" {
		return nil, badRequest("version is required (use \"*\" for the installed one)")
	}
	rt, ok := r.findRuntime(req.Language, req.Version)
	if !ok {
		msg := fmt.Sprintf("%s-%s runtime is unknown", req.Language, req.Version)
		if r.cfg.Programs != nil && r.cfg.Programs.Disabled() {
			msg += ": code execution is disabled (--allowed-programs is empty)"
		}
		return nil, unknownRuntime(msg)
	}
	p := &prepared{rt: rt}

	if len(req.Files) == 0 {
		return nil, badRequest("files is required and must contain at least one file")
	}
	if len(req.Files) > maxFiles {
		return nil, badRequest(fmt.Sprintf("too many files: %d (at most %d)", len(req.Files), maxFiles))
	}
	if err := p.addFiles(req.Files); err != nil {
		return nil, err
	}

	p.stdin = pistonStdin(req.Stdin)
	if err := checkArgs(req.Args); err != nil {
		return nil, err
	}
	p.args = req.Args

	env, err := r.checkEnv(req.EnvVars)
	if err != nil {
		return nil, err
	}
	p.env = env

	if err := r.checkLimits(req, p); err != nil {
		return nil, err
	}
	return p, nil
}

// addFiles decodes the request's files into p. A later file of the same name replaces an earlier one,
// as LibreChat's runner and Piston (which writes the files in order) behave; the entry point stays first.
// A file may not be both a file and the parent directory of another one.
func (p *prepared) addFiles(files []File) *Error {
	seen := map[string]int{}
	for i, f := range files {
		df, err := decodeFile(i, f, p.rt.interp.Ext)
		if err != nil {
			return err
		}
		if j, dup := seen[df.name]; dup {
			p.files[j].data = df.data
			continue
		}
		seen[df.name] = len(p.files)
		p.files = append(p.files, df)
	}
	for name, i := range seen {
		for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
			if j, clash := seen[dir]; clash {
				return badRequest(fmt.Sprintf("files[%d]: %q is a file but files[%d] uses it as a directory", j, dir, i))
			}
		}
	}
	return nil
}

// checkArgs bounds the arguments as the kernel will: no NUL, MAX_ARG_STRLEN each, maxArgBytes together.
func checkArgs(args []string) *Error {
	if len(args) > maxArgs {
		return badRequest(fmt.Sprintf("too many args: %d (at most %d)", len(args), maxArgs))
	}
	argBytes := 0
	for i, a := range args {
		if strings.IndexByte(a, 0) >= 0 {
			return badRequest(fmt.Sprintf("args[%d] contains a NUL byte", i))
		}
		if len(a) > maxArgStrlen {
			return badRequest(fmt.Sprintf("args[%d] is %d bytes (at most %d: the kernel's MAX_ARG_STRLEN)", i, len(a), maxArgStrlen))
		}
		argBytes += len(a) + 1 + 8 // the string, its NUL and its pointer on the new stack
	}
	if argBytes > maxArgBytes {
		return badRequest(fmt.Sprintf("args: %d bytes in total (at most %d)", argBytes, maxArgBytes))
	}
	return nil
}

// checkEnv validates env_vars (names, reserved names, NUL, sizes) and returns them as sorted NAME=value.
func (r *Runner) checkEnv(vars map[string]string) ([]string, *Error) {
	var env []string
	total := 0
	for k, v := range vars {
		total += len(k) + len(v) + 2
		switch {
		case !envKeyRE.MatchString(k):
			return nil, badRequest(fmt.Sprintf("env_vars: name %q must match ^[A-Za-z_][A-Za-z0-9_]*$", k))
		case r.reserved[k] != "":
			return nil, badRequest(fmt.Sprintf("env_vars: %s is reserved (%s)", k, r.reserved[k]))
		case strings.IndexByte(v, 0) >= 0:
			return nil, badRequest(fmt.Sprintf("env_vars: value of %s contains a NUL byte", k))
		case len(k)+1+len(v) > maxArgStrlen:
			return nil, badRequest(fmt.Sprintf("env_vars: %s=… is %d bytes (at most %d: the kernel's MAX_ARG_STRLEN)", k, len(k)+1+len(v), maxArgStrlen))
		}
		env = append(env, k+"="+v)
	}
	if total > maxEnvBytes {
		return nil, badRequest(fmt.Sprintf("env_vars: %d bytes in total (at most %d)", total, maxEnvBytes))
	}
	slices.Sort(env)
	return env, nil
}

// checkLimits reads the run and compile timeouts, CPU times and memory limits into p, bounded by the
// operator's maxima.
func (r *Runner) checkLimits(req *ExecuteRequest, p *prepared) *Error {
	maxMS := r.cfg.MaxRunTimeout.Milliseconds()
	timeout, err := checkMillis("run_timeout", req.RunTimeout, maxMS)
	if err != nil {
		return err
	}
	p.timeout = time.Duration(timeout) * time.Millisecond
	ct, err := checkMillis("compile_timeout", req.CompileTimeout, maxMS)
	if err != nil {
		return err
	}
	p.compileTimeout = time.Duration(ct) * time.Millisecond
	cpu, err := checkMillis("run_cpu_time", req.RunCPUTime, maxMS)
	if err != nil {
		return err
	}
	if req.RunCPUTime != nil && *req.RunCPUTime != 0 {
		// RLIMIT_CPU counts whole seconds: round up, so a limit never ends a run earlier than asked.
		p.cpu = (time.Duration(cpu)*time.Millisecond + time.Second - 1).Truncate(time.Second)
	}
	ccpu, err := checkMillis("compile_cpu_time", req.CompileCPUTime, maxMS)
	if err != nil {
		return err
	}
	if req.CompileCPUTime != nil && *req.CompileCPUTime != 0 {
		p.compileCPU = (time.Duration(ccpu)*time.Millisecond + time.Second - 1).Truncate(time.Second)
	}
	if p.memory, err = r.checkMemory("run_memory_limit", req.RunMemoryLimit); err != nil {
		return err
	}
	if p.compileMemory, err = r.checkMemory("compile_memory_limit", req.CompileMemoryLimit); err != nil {
		return err
	}
	return nil
}

// checkMillis validates an optional duration in ms; absent or 0 means the maximum (Piston skips a zero
// limit and runs with its configured one), a fraction is rounded up to whole milliseconds, and more than
// the maximum is clamped to it, as LibreChat's runner does (a client asking for more than the server
// allows gets what the server allows; Piston refuses, but LibreChat's hub derives run_timeout from its
// own deadline).
func checkMillis(field string, v *float64, maxMS int64) (int64, *Error) {
	if v == nil || *v == 0 {
		return maxMS, nil
	}
	if *v < 0 {
		return 0, badRequest(fmt.Sprintf("%s must be non-negative milliseconds (0 means the server's maximum), got %v", field, *v))
	}
	if *v >= float64(maxMS) {
		return maxMS, nil
	}
	return int64(math.Ceil(*v)), nil
}

// pistonStdin is the stdin a run reads: Piston adds a trailing newline when the request's stdin lacks
// one (an absent stdin is then a single newline), so line-reading programs (input(), read) see the last
// line complete instead of EOF.
func pistonStdin(stdin *string) []byte {
	s := ""
	if stdin != nil {
		s = *stdin
	}
	if !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	return []byte(s)
}

// checkMemory validates an optional memory limit in bytes; absent or −1 means the maximum.
func (r *Runner) checkMemory(field string, v *int64) (int64, *Error) {
	if v == nil || *v == -1 {
		return r.cfg.MaxMemory, nil
	}
	switch {
	case *v < minMemory:
		return 0, badRequest(fmt.Sprintf("%s must be -1 or at least %d bytes, got %d", field, minMemory, *v))
	case *v > r.cfg.MaxMemory:
		return 0, badRequest(fmt.Sprintf("%s cannot exceed the configured limit of %d bytes", field, r.cfg.MaxMemory))
	}
	return *v, nil
}

func decodeFile(i int, f File, ext string) (decodedFile, *Error) {
	at := "files[" + strconv.Itoa(i) + "]"
	if f.ID != "" || f.StorageSessionID != "" {
		return decodedFile{}, badRequest(at + ": file references (id, storage_session_id) are not supported by this runner; send content")
	}
	if f.Content == nil {
		return decodedFile{}, badRequest(at + ": content is required")
	}
	if f.InputCacheKey != "" && !cacheKeyRE.MatchString(f.InputCacheKey) {
		return decodedFile{}, badRequest(at + ": input_cache_key must be 64 lowercase hex digits")
	}
	var data []byte
	switch f.Encoding {
	case "", "utf8", "utf-8":
		data = []byte(*f.Content)
	case "base64":
		b, err := base64.StdEncoding.DecodeString(*f.Content)
		if err != nil {
			return decodedFile{}, badRequest(at + ": content is not valid base64: " + err.Error())
		}
		data = b
	case "hex":
		b, err := hex.DecodeString(*f.Content)
		if err != nil {
			return decodedFile{}, badRequest(at + ": content is not valid hex: " + err.Error())
		}
		data = b
	default:
		return decodedFile{}, badRequest(fmt.Sprintf("%s: encoding %q is not one of utf8, base64, hex", at, f.Encoding))
	}
	name := f.Name
	for strings.HasPrefix(name, "./") { // "./main.py" names main.py, as in LibreChat's runner and Piston
		name = name[2:]
	}
	if name == "" {
		// Piston names anonymous files file<i>.code; keeping the interpreter's extension instead makes the
		// entry point look like what it is to interpreters that care (php, node's module type).
		name = "file" + strconv.Itoa(i) + ext
	}
	if msg := checkName(name); msg != "" {
		return decodedFile{}, badRequest(fmt.Sprintf("%s: name %q %s", at, name, msg))
	}
	return decodedFile{name: name, data: data}, nil
}

// checkName accepts relative, clean, slash-separated paths that stay inside the workspace
// (wire.CheckFileName). The reserved scratch directory tmp/ is refused so a request cannot plant files
// where TMPDIR points.
func checkName(name string) string {
	if msg := wire.CheckFileName(name); msg != "" {
		return msg
	}
	if name == scratchDir || strings.HasPrefix(name, scratchDir+"/") {
		return "is inside the reserved scratch directory " + scratchDir + "/"
	}
	return ""
}

// findRuntime resolves a language (Piston's name or an alias, case-insensitive) and a version selector
// among the enabled runtimes: the newest matching version wins, as with Piston.
func (r *Runner) findRuntime(lang, version string) (Runtime, bool) {
	lang = strings.ToLower(strings.TrimSpace(lang))
	var best Runtime
	found := false
	for _, rt := range r.runtimes {
		if rt.Language != lang && !contains(rt.Aliases, lang) {
			continue
		}
		if versionMatches(rt.Version, version) && (!found || newer(rt.Version, best.Version)) {
			best, found = rt, true
		}
	}
	return best, found
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
