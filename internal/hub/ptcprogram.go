package hub

// Programmatic tool calling's sandbox programs (upstream's replay mode, LibreChat-AI/code-interpreter
// service/src/preamble.ts and preamble-bash.ts, rewritten): every round trip runs the caller's code from
// the start in a fresh sandbox, with a preamble that defines each tool as a function. A call whose result
// the history holds returns it at once; the first call it does not hold is printed between two
// execution-scoped sentinel lines and the program stops there, so the hub can hand the call to the
// client and run the code again once the result comes back. The history travels inside the generated
// program itself (a JSON or bash literal), so nothing but the entry file is written into the workspace
// and no input name is reserved.

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// ptcTool is one tool of a programmatic request (agents' LCTool: name, description, JSON-schema
// parameters).
type ptcTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// ptcHistoryEntry is one answered tool call: the call as the program made it (to detect code that calls
// tools in a different order on a later run) and the client's result.
type ptcHistoryEntry struct {
	ToolName     string          `json:"tool_name"`
	Input        string          `json:"input"` // the input exactly as the program printed it
	Result       json.RawMessage `json:"result,omitempty"`
	IsError      bool            `json:"is_error,omitempty"`
	ErrorMessage string          `json:"error_message,omitempty"`
}

// ptcPending is a tool call the program stopped at.
type ptcPending struct {
	CallID   string
	ToolName string
	Input    string // raw input text: JSON from python, the argument as given from bash
}

var pythonKeywords = map[string]bool{}

func init() {
	for _, k := range strings.Fields("False None True and as assert async await break class continue def del elif else except finally for from global if import in is lambda nonlocal not or pass raise return try while with yield") {
		pythonKeywords[k] = true
	}
}

// bashReserved are the names upstream's bash preamble suffixes with _tool (shell keywords and the
// builtins a tool function must not shadow).
var bashReserved = map[string]bool{}

func init() {
	for _, k := range strings.Fields("if then else elif fi case esac for select while until do done in function time coproc return exit break continue shift export readonly local declare typeset unset alias unalias source echo printf read cd pwd kill trap wait eval exec jobs bg fg set let test true false") {
		bashReserved[k] = true
	}
}

var (
	nonIdent    = regexp.MustCompile(`[^A-Za-z0-9_]`)
	pySeparator = regexp.MustCompile(`[-\s]`)
	shSeparator = regexp.MustCompile(`[-\s.]`)
	identifier  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// ptcFunctionName is the function name a tool gets in the program, exactly as the client
// (danny-avila/agents normalizeToPythonIdentifier / normalizeToBashIdentifier) expects it: separators
// become underscores, other invalid characters go, a leading digit gets an underscore, and a reserved
// word gets the suffix _tool (in bash also the preamble's own _ptc_ prefix).
func ptcFunctionName(lang, name string) string {
	sep := pySeparator
	if lang == "bash" {
		sep = shSeparator
	}
	n := nonIdent.ReplaceAllString(sep.ReplaceAllString(name, "_"), "")
	if n != "" && n[0] >= '0' && n[0] <= '9' {
		n = "_" + n
	}
	switch {
	case lang == "python" && pythonKeywords[n]:
		n += "_tool"
	case lang == "bash" && (bashReserved[n] || strings.HasPrefix(strings.ToLower(n), "_ptc_")):
		n += "_tool"
	case lang == "python" && strings.HasPrefix(n, "_ptc_"):
		n += "_tool" // the preamble's own names
	}
	if n == "" {
		n = "tool"
	}
	return n
}

// ptcNameCollision returns the first two tools whose names become the same function, or "".
func ptcNameCollision(lang string, tools []ptcTool) string {
	seen := map[string]string{}
	for _, t := range tools {
		fn := ptcFunctionName(lang, t.Name)
		if prior, ok := seen[fn]; ok && prior != t.Name {
			return fmt.Sprintf("Tool names %q and %q normalize to the same function identifier %q; rename one to avoid collision", prior, t.Name, fn)
		}
		seen[fn] = t.Name
	}
	return ""
}

// ptcSentinels are the lines that frame a pending call: scoped by the execution ID, as upstream's are,
// so that output which merely mentions the marker is not taken for one.
func ptcSentinels(executionID string) (start, end string) {
	return "__PTC_PENDING_V1_START____" + executionID, "__PTC_PENDING_V1_END____" + executionID
}

// jsonLiteral renders s as a JSON string, which is also a valid Python string literal.
func jsonLiteral(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// shQuote renders s as a single-quoted bash word.
func shQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// schemaParams reads a tool's JSON-schema properties: the names usable as Python keyword arguments, the
// required ones first (as upstream's stubs order them).
func schemaParams(raw json.RawMessage) (required, optional []string) {
	var s struct {
		Properties map[string]json.RawMessage `json:"properties"`
		Required   []string                   `json:"required"`
	}
	if json.Unmarshal(raw, &s) != nil {
		return nil, nil
	}
	req := map[string]bool{}
	for _, r := range s.Required {
		req[r] = true
	}
	for name := range s.Properties {
		if !identifier.MatchString(name) || pythonKeywords[name] || strings.HasPrefix(name, "_ptc") {
			continue // still accepted through **kwargs
		}
		if req[name] {
			required = append(required, name)
		} else {
			optional = append(optional, name)
		}
	}
	sort.Strings(required)
	sort.Strings(optional)
	return required, optional
}

// pythonProgram is main.py of one round trip.
func pythonProgram(executionID, code string, tools []ptcTool, history map[string]ptcHistoryEntry) string {
	start, end := ptcSentinels(executionID)
	hist, _ := json.Marshal(history)
	var b strings.Builder
	fmt.Fprintf(&b, `# codellm programmatic tool calling (replay): generated for this run, do not edit.
import asyncio, json, os, sys
import ast as _ptc_ast

_PTC_START = %s
_PTC_END = %s
_PTC_HISTORY = json.loads(%s)
_ptc_count = 0

class ToolExecutionError(Exception):
    """A tool call the client answered with is_error."""

async def _ptc_call(tool_name, args):
    global _ptc_count
    _ptc_count += 1
    call_id = "call_%%03d" %% _ptc_count
    text = json.dumps(args, sort_keys=True, default=str)
    done = _PTC_HISTORY.get(call_id)
    if done is not None:
        if done.get("tool_name") != tool_name or done.get("input") != text:
            raise RuntimeError("programmatic replay diverged at %%s: the earlier run called %%s(%%s), this run %%s(%%s); "
                               "the code must make the same tool calls in the same order on every run"
                               %% (call_id, done.get("tool_name"), done.get("input"), tool_name, text))
        if done.get("is_error"):
            raise ToolExecutionError(done.get("error_message") or "Tool execution failed")
        return done.get("result")
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        pass
    os.write(1, ("\n%%s\n%%s\n%%s\n%%s\n" %% (_PTC_START, json.dumps({"call_id": call_id, "tool_name": tool_name}), text, _PTC_END)).encode("utf-8"))
    os._exit(0)

`, jsonLiteral(start), jsonLiteral(end), jsonLiteral(string(hist)))
	for _, t := range tools {
		fn := ptcFunctionName("python", t.Name)
		req, opt := schemaParams(t.Parameters)
		var params []string
		if len(req)+len(opt) > 0 {
			params = append([]string{"*"}, req...) // keyword-only, as the client's prompt tells the model
		}
		for _, o := range opt {
			params = append(params, o+"=None")
		}
		params = append(params, "**_ptc_more")
		fmt.Fprintf(&b, "async def %s(%s):\n    _ptc_args = {", fn, strings.Join(params, ", "))
		for _, p := range append(req, opt...) {
			fmt.Fprintf(&b, "%s: %s, ", jsonLiteral(p), p)
		}
		fmt.Fprintf(&b, "}\n    _ptc_args = {k: v for k, v in _ptc_args.items() if v is not None}\n    _ptc_args.update(_ptc_more)\n"+
			"    return await _ptc_call(%s, _ptc_args)\n%s.__doc__ = %s\n\n", jsonLiteral(t.Name), fn, jsonLiteral(t.Description))
	}
	// The caller's code runs as written (no re-indentation into a wrapper, so its multi-line strings and
	// line numbers stay intact), compiled with top-level await.
	// Its traceback lines are the caller's own: the source is registered under the name "<code>".
	fmt.Fprintf(&b, `import linecache as _ptc_linecache
_ptc_src = %s
_ptc_linecache.cache["<code>"] = (len(_ptc_src), None, _ptc_src.splitlines(True), "<code>")
_ptc_code = compile(_ptc_src, "<code>", "exec", flags=_ptc_ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
try:
    _ptc_run = eval(_ptc_code, globals())
    if asyncio.iscoroutine(_ptc_run):
        asyncio.run(_ptc_run)
except SystemExit:
    raise
except BaseException as _ptc_e:
    # Printed by the traceback module (the interpreter's own hook reads lines from disk), from the
    # caller's first frame.
    import traceback as _ptc_traceback
    _ptc_traceback.print_exception(type(_ptc_e), _ptc_e, _ptc_e.__traceback__.tb_next)
    sys.exit(1)
`, jsonLiteral(code))
	return b.String()
}

// bashProgram is main.sh of one round trip. The caller's code runs in a subshell; a tool function that
// meets a call the history does not hold (also inside $(...)) records it and kills that subshell, and the
// outer shell prints the call between the sentinels. Bash runs one tool call per round trip.
func bashProgram(executionID, code string, tools []ptcTool, history map[string]ptcHistoryEntry) string {
	start, end := ptcSentinels(executionID)
	var b strings.Builder
	fmt.Fprintf(&b, `#!/bin/bash
# codellm programmatic tool calling (replay): generated for this run, do not edit.
_PTC_START=%s
_PTC_END=%s
_PTC_RUN="$PWD/.ptc_run"
rm -rf "$_PTC_RUN" && mkdir -p "$_PTC_RUN" && printf 0 > "$_PTC_RUN/count" || exit 1
declare -a _ptc_tool _ptc_input _ptc_out _ptc_err
`, shQuote(start), shQuote(end))
	writeBashHistory(&b, history)
	b.WriteString(`_ptc_call() {
    local n id
    n=$(( $(cat "$_PTC_RUN/count") + 1 ))
    printf '%s' "$n" > "$_PTC_RUN/count"
    printf -v id 'call_%03d' "$n"
    if [ -n "${_ptc_tool[$n]+set}" ]; then
        if [ "${_ptc_tool[$n]}" != "$1" ] || [ "${_ptc_input[$n]}" != "${2-}" ]; then
            printf 'programmatic replay diverged at %s: the earlier run called %s %s, this run %s %s; the code must make the same tool calls in the same order on every run\n' "$id" "${_ptc_tool[$n]}" "${_ptc_input[$n]}" "$1" "${2-}" >&2
            : > "$_PTC_RUN/diverged"
            kill -KILL "$_PTC_MAIN" 2>/dev/null
            exit 1
        fi
        if [ "${_ptc_err[$n]}" = 1 ]; then
            printf '%s\n' "${_ptc_out[$n]}" >&2
            return 1
        fi
        printf '%s\n' "${_ptc_out[$n]}"
        return 0
    fi
    printf '%s\n%s' "$id" "$1" > "$_PTC_RUN/pending.head"
    printf '%s' "${2-}" > "$_PTC_RUN/pending.input"
    kill -KILL "$_PTC_MAIN" 2>/dev/null
    exit 0
}
`)
	for _, t := range tools {
		fmt.Fprintf(&b, "%s() { _ptc_call %s \"${1-}\"; }\n", ptcFunctionName("bash", t.Name), shQuote(t.Name))
	}
	fmt.Fprintf(&b, `_ptc_code=%s
# The shell's own report of the killed subshell ("Killed") is not the program's output.
exec 3>&2
{ ( _PTC_MAIN=$BASHPID; eval "$_ptc_code" ) 2>&3 3>&-; } 2>/dev/null
_ptc_rc=$?
exec 3>&-
if [ -f "$_PTC_RUN/pending.head" ]; then
    { IFS= read -r _ptc_id; IFS= read -r _ptc_name; } < "$_PTC_RUN/pending.head"
    printf '\n%%s\n' "$_PTC_START"
    printf '%%s\n' "{\"call_id\":\"$_ptc_id\",\"name_line\":true}"
    printf '%%s\n' "$_ptc_name"
    cat "$_PTC_RUN/pending.input"
    printf '\n%%s\n' "$_PTC_END"
    rm -rf "$_PTC_RUN"
    exit 0
fi
[ -f "$_PTC_RUN/diverged" ] && _ptc_rc=1
rm -rf "$_PTC_RUN"
exit $_ptc_rc
`, shQuote(code))
	return b.String()
}

// writeBashHistory sets the replay's arrays: for each earlier call by number, its tool, input, what the
// tool function prints and whether it fails.
func writeBashHistory(b *strings.Builder, history map[string]ptcHistoryEntry) {
	ids := make([]string, 0, len(history))
	for id := range history {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		var n int
		if _, err := fmt.Sscanf(id, "call_%d", &n); err != nil {
			continue
		}
		e := history[id]
		out, isErr := bashResult(e), 0
		if e.IsError {
			out, isErr = e.ErrorMessage, 1
			if out == "" {
				out = "Tool execution failed"
			}
		}
		fmt.Fprintf(b, "_ptc_tool[%d]=%s; _ptc_input[%d]=%s; _ptc_out[%d]=%s; _ptc_err[%d]=%d\n",
			n, shQuote(e.ToolName), n, shQuote(e.Input), n, shQuote(out), n, isErr)
	}
}

// bashResult is a result as a bash tool function prints it: a string as is, anything else as compact
// JSON (upstream's "tool stdout is one compact JSON value").
func bashResult(e ptcHistoryEntry) string {
	var s string
	if json.Unmarshal(e.Result, &s) == nil {
		return s
	}
	if len(e.Result) == 0 {
		return "null"
	}
	var v any
	if json.Unmarshal(e.Result, &v) != nil {
		return string(e.Result)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// extractPending finds the pending call a run stopped at: the last line that is exactly the start
// sentinel and a later end sentinel line. It returns stdout without the block (and without the one
// newline the preamble printed before it), or ok false when the run did not stop at a call.
func extractPending(stdout, executionID string) (clean string, p ptcPending, ok bool) {
	start, end := ptcSentinels(executionID)
	lines := strings.Split(stdout, "\n")
	si, ei := -1, -1
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.TrimSpace(lines[i]) == end && ei < 0 {
			ei = i
		} else if strings.TrimSpace(lines[i]) == start && ei > i {
			si = i
			break
		}
	}
	if si < 0 || ei-si < 3 {
		return stdout, p, false
	}
	var head struct {
		CallID   string `json:"call_id"`
		ToolName string `json:"tool_name"`
		NameLine bool   `json:"name_line"` // bash: the name follows on its own line, as written
	}
	if json.Unmarshal([]byte(lines[si+1]), &head) != nil || head.CallID == "" {
		return stdout, p, false
	}
	body := lines[si+2 : ei]
	if head.NameLine {
		head.ToolName, body = body[0], body[1:]
	}
	p = ptcPending{CallID: head.CallID, ToolName: head.ToolName, Input: strings.Join(body, "\n")}
	// lines[:si] joined is the output before the block less the newline the preamble printed first.
	clean = strings.Join(lines[:si], "\n")
	after := strings.Join(lines[ei+1:], "\n")
	return clean + after, p, true
}
