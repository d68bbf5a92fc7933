package hub

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runPTC runs a generated program with the local interpreter in a fresh directory (as the runner does,
// the program's directory is the working directory) and returns stdout, stderr and the exit code.
func runPTC(t *testing.T, lang, program string) (string, string, int) {
	t.Helper()
	interp, entry := "python3", "main.py"
	if lang == "bash" {
		interp, entry = "bash", "main.sh"
	}
	if _, err := exec.LookPath(interp); err != nil {
		t.Skipf("%s is not installed", interp)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, entry), []byte(program), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(interp, entry)
	cmd.Dir = dir
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	left, _ := os.ReadDir(dir)
	if len(left) != 1 {
		t.Fatalf("the program left files behind: %v", left)
	}
	return out.String(), errb.String(), code
}

var ptcTestTools = []ptcTool{
	{Name: "get-weather", Description: "Weather of a city", Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"},"units":{"type":"string"}},"required":["city"]}`)},
	{Name: "import", Description: "a keyword"},
}

// TestPTCPythonReplay: the python program stops at the first call the history lacks (keyword-only
// arguments, keyword tool name suffixed), prints nothing of the block into the visible stdout, returns
// recorded results on the next run, raises ToolExecutionError for an error result, and refuses a
// history that does not match the calls it makes.
func TestPTCPythonReplay(t *testing.T) {
	const id = "exec_0123456789abcdefg"
	code := "print('start')\nw = await get_weather(city=\"Paris\")\nprint('got', w['temp'])\ntry:\n    await import_tool(x=1)\nexcept ToolExecutionError as e:\n    print('failed:', e)\ns = '''a\nb'''\nprint(s)\n"
	hist := map[string]ptcHistoryEntry{}
	out, _, rc := runPTC(t, "python", pythonProgram(id, code, ptcTestTools, hist))
	clean, p, ok := extractPending(out, id)
	if rc != 0 || !ok || clean != "start\n" || p.CallID != "call_001" || p.ToolName != "get-weather" || p.Input != `{"city": "Paris"}` {
		t.Fatalf("first run: rc %d ok %v clean %q pending %+v\n%s", rc, ok, clean, p, out)
	}
	hist["call_001"] = ptcHistoryEntry{ToolName: p.ToolName, Input: p.Input, Result: json.RawMessage(`{"temp":21}`)}
	out, _, _ = runPTC(t, "python", pythonProgram(id, code, ptcTestTools, hist))
	clean, p, ok = extractPending(out, id)
	if !ok || clean != "start\ngot 21\n" || p.CallID != "call_002" || p.ToolName != "import" || p.Input != `{"x": 1}` {
		t.Fatalf("second run: %q %+v", out, p)
	}
	hist["call_002"] = ptcHistoryEntry{ToolName: p.ToolName, Input: p.Input, IsError: true, ErrorMessage: "denied"}
	out, errs, rc := runPTC(t, "python", pythonProgram(id, code, ptcTestTools, hist))
	if _, _, ok := extractPending(out, id); ok || rc != 0 || out != "start\ngot 21\nfailed: denied\na\nb\n" {
		t.Fatalf("last run: rc %d %q %s", rc, out, errs)
	}
	// Code that calls other tools than the recorded history fails, naming the divergence.
	hist["call_001"] = ptcHistoryEntry{ToolName: "get-weather", Input: `{"city": "Rome"}`, Result: json.RawMessage(`{}`)}
	_, errs, rc = runPTC(t, "python", pythonProgram(id, code, ptcTestTools, hist))
	if rc == 0 || !strings.Contains(errs, "programmatic replay diverged at call_001") {
		t.Fatalf("diverged run: rc %d %s", rc, errs)
	}
}

// TestPTCBashReplay: bash tools are functions taking one JSON argument; a call inside $(...) stops the
// whole script; recorded results print as strings or compact JSON; an error result goes to stderr with
// status 1.
func TestPTCBashReplay(t *testing.T) {
	const id = "exec_0123456789abcdefg"
	code := "echo start\nw=$(get_weather '{\"city\": \"Paris\"}')\necho \"got $w\"\nif ! import; then echo failed; fi\necho done\nexit 3\n"
	hist := map[string]ptcHistoryEntry{}
	out, _, rc := runPTC(t, "bash", bashProgram(id, code, ptcTestTools, hist))
	clean, p, ok := extractPending(out, id)
	if rc != 0 || !ok || clean != "start\n" || p.CallID != "call_001" || p.ToolName != "get-weather" || p.Input != `{"city": "Paris"}` {
		t.Fatalf("first run: rc %d ok %v clean %q %+v\n%q", rc, ok, clean, p, out)
	}
	hist["call_001"] = ptcHistoryEntry{ToolName: p.ToolName, Input: p.Input, Result: json.RawMessage(`{"temp": 21, "sky": "it's clear"}`)}
	out, _, _ = runPTC(t, "bash", bashProgram(id, code, ptcTestTools, hist))
	clean, p, ok = extractPending(out, id)
	if !ok || clean != "start\ngot {\"sky\":\"it's clear\",\"temp\":21}\n" || p.CallID != "call_002" || p.ToolName != "import" || p.Input != "" {
		t.Fatalf("second run: %q %+v", out, p)
	}
	hist["call_002"] = ptcHistoryEntry{ToolName: p.ToolName, Input: p.Input, IsError: true, ErrorMessage: "denied"}
	out, errs, rc := runPTC(t, "bash", bashProgram(id, code, ptcTestTools, hist))
	if _, _, ok := extractPending(out, id); ok || rc != 3 || !strings.HasSuffix(out, "failed\ndone\n") || errs != "denied\n" {
		t.Fatalf("last run: rc %d %q %q", rc, out, errs)
	}
}

// TestPTCNames: the function names the client expects (agents' normalizeToPythonIdentifier and
// normalizeToBashIdentifier), and the collision refusal.
func TestPTCNames(t *testing.T) {
	for _, c := range []struct{ lang, in, want string }{
		{"python", "get-weather", "get_weather"}, {"python", "class", "class_tool"}, {"python", "9lives", "_9lives"},
		{"python", "a.b c", "ab_c"}, {"bash", "a.b c", "a_b_c"}, {"bash", "echo", "echo_tool"}, {"bash", "_ptc_call", "_ptc_call_tool"},
	} {
		if got := ptcFunctionName(c.lang, c.in); got != c.want {
			t.Errorf("%s %q: %q, want %q", c.lang, c.in, got, c.want)
		}
	}
	if msg := ptcNameCollision("python", []ptcTool{{Name: "a-b"}, {Name: "a_b"}}); !strings.Contains(msg, `"a-b" and "a_b"`) {
		t.Fatalf("collision: %q", msg)
	}
}
