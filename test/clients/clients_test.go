// Package clients drives the real npm OpenAI clients (openai-node 6, the AI SDK 6 over
// @ai-sdk/openai-compatible and @ai-sdk/openai, @openai/agents, LangChain JS and its createAgent) against
// a real `codellm serve` built from this tree: node runs run.mjs, one scenario per subtest, and this test
// checks what the clients saw and what the server counted. langchaingo_test.go drives langchaingo (Go) the
// same way, without node.
// .ci/run installs the pinned packages with `npm ci` into test/clients/node_modules.
package clients

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/testhelp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		if binDir != "" {
			os.RemoveAll(binDir)
		}
		os.Exit(code) // a Cleanup must exit itself, or a leak found would not fail the run
	}))
}

var binDir string

// binary builds cmd/codellm once for every test of the package.
var binary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "codellm-clients-bin-")
	if err != nil {
		return "", err
	}
	binDir = dir
	bin := filepath.Join(dir, "codellm")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/codellm").CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

const apiKey = "test-key-0123456789abcdef0123456789abcdef"

type serve struct {
	base string
	cmd  *exec.Cmd
}

// nodeBin is the node the scenarios run on: the one package.json pins (the npm package `node`), since
// several frameworks need node 22 and Debian's nodejs may be older.
const nodeBin = "node_modules/.bin/node"

// needNode skips without the installed packages (and their node), except where the test environment
// requires everything (CI), where it fails.
func needNode(t *testing.T) {
	t.Helper()
	_, errNode := os.Stat(nodeBin)
	_, errMods := os.Stat("node_modules/openai/package.json")
	if errNode == nil && errMods == nil {
		return
	}
	msg := fmt.Sprintf("%s (%v) or test/clients/node_modules (%v) missing: run `npm ci --prefix test/clients`", nodeBin, errNode, errMods)
	if os.Getenv("CI") != "" || os.Getenv("CODELLM_REQUIRE_SANDBOX") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// startServe builds cmd/codellm and serves it on a free loopback port until the test ends.
func startServe(t *testing.T, extra ...string) *serve {
	t.Helper()
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	mode := "besteffort"
	if os.Getenv("CODELLM_REQUIRE_SANDBOX") == "1" {
		mode = "native"
	}
	work := testhelp.NewWorkDir(t, "codellm-clients-")
	args := append([]string{"serve", "--listen", addr, "--sandbox", mode, "--work-dir", work}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "CODELLM_API_KEY="+apiKey)
	logs := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &serve{base: "http://" + addr, cmd: cmd}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		// SIGTERM first (SIGKILL after 30 s): a server that stops that way unmounts its workspaces itself.
		if testhelp.StopGracefully(cmd.Process, done, 30*time.Second) {
			if m := testhelp.MountsUnder(t, work); len(m) != 0 {
				t.Errorf("a SIGTERMed codellm serve left mounts under its work dir: %q", m)
			}
		}
		if t.Failed() {
			t.Logf("codellm serve log:\n%s", logs)
		}
	})
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get(s.base + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		select {
		case err := <-done:
			done <- err // for the cleanup
			t.Fatalf("codellm serve exited: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("codellm serve did not become ready:\n%s", logs)
		}
	}
	return s
}

// node runs one scenario of run.mjs and decodes its JSON into out.
func (s *serve) node(t *testing.T, scenario string, out any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, nodeBin, "run.mjs", scenario)
	cmd.Env = append(os.Environ(), "CODELLM_BASE_URL="+s.base+"/v1", "CODELLM_API_KEY="+apiKey)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("node run.mjs %s: %v\n%s", scenario, err, stderr.String())
	}
	if err := json.Unmarshal(stdout, out); err != nil {
		t.Fatalf("node run.mjs %s printed %q: %v", scenario, stdout, err)
	}
}

// metric sums the samples of a metric whose line starts with prefix.
func (s *serve) metric(t *testing.T, prefix string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, s.base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+apiKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	n := 0
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, prefix) {
			f := strings.Fields(line)
			v, _ := strconv.Atoi(f[len(f)-1])
			n += v
		}
	}
	return n
}

func (s *serve) runs(t *testing.T) int { return s.metric(t, "codellm_run_duration_seconds_count") }

type nodeCall struct {
	ID     string         `json:"id"`
	CallID string         `json:"call_id"`
	Type   string         `json:"type"`
	Name   string         `json:"name"`
	Args   map[string]any `json:"args"`
}

type nodeError struct {
	Name, Code, Type, Message string
	Status                    int
}

var callID = regexp.MustCompile(`^call_[A-Za-z0-9]{24}$`)

func checkCalls(t *testing.T, got []nodeCall, names ...string) {
	t.Helper()
	seen := map[string]bool{}
	if len(got) != len(names) {
		t.Fatalf("calls %+v, want %v", got, names)
	}
	for i, c := range got {
		id := c.ID + c.CallID
		if c.Name != names[i] || !callID.MatchString(id) || seen[id] {
			t.Fatalf("call %d %+v, want %s with a fresh id", i, c, names[i])
		}
		seen[id] = true
	}
}

func TestOpenAINode(t *testing.T) {
	needNode(t)
	s := startServe(t)
	t.Run("chat", func(t *testing.T) {
		var r struct {
			Content      *string    `json:"content"`
			FinishReason string     `json:"finish_reason"`
			Fingerprint  string     `json:"fingerprint"`
			Calls        []nodeCall `json:"calls"`
		}
		s.node(t, "chat", &r)
		checkCalls(t, r.Calls, "write_note", "finish")
		if r.Content != nil || r.FinishReason != "tool_calls" || r.Fingerprint != "fp_codellm" ||
			r.Calls[0].Args["content"] != "hi" || r.Calls[1].Args["answer"] != "wrote" {
			t.Fatalf("%+v", r)
		}
	})
	t.Run("stream", func(t *testing.T) {
		var r struct {
			Chunks int        `json:"chunks"`
			Calls  []nodeCall `json:"calls"`
		}
		s.node(t, "stream", &r)
		checkCalls(t, r.Calls, "write_note", "finish")
		if r.Chunks != 6 || r.Calls[0].Args["path"] != "a.md" {
			t.Fatalf("%+v", r)
		}
	})
	t.Run("errors", func(t *testing.T) {
		var e422, e401 nodeError
		s.node(t, "error422", &e422)
		s.node(t, "error401", &e401)
		if e422.Name != "UnprocessableEntityError" || e422.Status != 422 || e422.Code != "nonzero_exit" || e422.Type != "code_execution_error" ||
			!strings.Contains(e422.Message, "boom") {
			t.Errorf("422: %+v", e422)
		}
		if e401.Name != "AuthenticationError" || e401.Status != 401 || e401.Code != "invalid_api_key" {
			t.Errorf("401: %+v", e401)
		}
	})
	t.Run("models", func(t *testing.T) {
		var r struct {
			IDs       []string  `json:"ids"`
			Retrieved string    `json:"retrieved"`
			Missing   nodeError `json:"missing"`
		}
		s.node(t, "models", &r)
		if len(r.IDs) != 1 || r.IDs[0] != "codellm" || r.Retrieved != "codellm" || r.Missing.Name != "NotFoundError" || r.Missing.Code != "model_not_found" {
			t.Fatalf("%+v", r)
		}
	})
	t.Run("responses", func(t *testing.T) {
		var r struct {
			Status   string     `json:"status"`
			Calls    []nodeCall `json:"calls"`
			Events   []string   `json:"events"`
			Streamed []nodeCall `json:"streamed"`
		}
		s.node(t, "responses", &r)
		checkCalls(t, r.Calls, "write_note", "finish")
		checkCalls(t, r.Streamed, "finish")
		want := "response.created response.in_progress response.output_item.added response.function_call_arguments.delta " +
			"response.function_call_arguments.done response.output_item.done response.completed"
		if r.Status != "completed" || r.Calls[0].Type != "function_call" || strings.Join(r.Events, " ") != want ||
			r.Streamed[0].Args["answer"] != "streamed" {
			t.Fatalf("%+v", r)
		}
	})
	t.Run("responses resource", func(t *testing.T) {
		var r struct {
			Same        bool              `json:"same"`
			Metadata    map[string]string `json:"metadata"`
			Temperature float64           `json:"temperature"`
			Items       []string          `json:"items"`
			Next        struct {
				Text     string `json:"text"`
				Status   string `json:"status"`
				Previous bool   `json:"previous"`
			} `json:"next"`
			Gone    nodeError `json:"gone"`
			Events  []string  `json:"events"`
			Failure struct{ Code, Message string }
		}
		requests, runs := s.loop(t, "responsesResource", &r)
		if !r.Same || r.Metadata["role"] != "indexer" || r.Temperature != 0.5 || strings.Join(r.Items, ",") != "message:user" {
			t.Fatalf("retrieve and input_items: %+v", r)
		}
		if r.Next.Text != "wrote" || r.Next.Status != "completed" || !r.Next.Previous || r.Gone.Name != "NotFoundError" {
			t.Fatalf("follow-up and delete: %+v", r)
		}
		if strings.Join(r.Events, ",") != "response.created,response.in_progress,response.failed" || r.Failure.Code != "nonzero_exit" ||
			!strings.Contains(r.Failure.Message, "boom") {
			t.Fatalf("failed stream: %+v", r)
		}
		// Two answered requests (the failed stream counts under its code) and two runs: the follow-up ran
		// nothing.
		if requests != 2 || runs != 2 {
			t.Fatalf("%d requests, %d runs", requests, runs)
		}
	})
	// openai-node gives up after 1 s and retries (X-Stainless-Retry-Count) while the 2.5 s block runs:
	// the retries attach to the first run, and the code runs once.
	t.Run("retry under a client timeout", func(t *testing.T) {
		before := s.runs(t)
		var r struct{ Answer string }
		s.node(t, "retry", &r)
		if r.Answer != "slow" {
			t.Fatalf("%+v", r)
		}
		if n := s.runs(t) - before; n != 1 {
			t.Fatalf("the code ran %d times", n)
		}
		if s.metric(t, `codellm_idempotency_events_total{event="attached"}`) < 1 {
			t.Fatal("no retry attached to the running first attempt")
		}
	})
	t.Run("runTools", func(t *testing.T) {
		var r struct {
			OneStep  []string `json:"oneStep"`
			Executed []string `json:"executed"`
			Text     string   `json:"text"`
		}
		requests, runs := s.loop(t, "runTools", &r)
		if strings.Join(r.OneStep, ",") != "write_note,finish" {
			t.Fatalf("maxChatCompletions 1: %v", r.OneStep)
		}
		// With its defaults (maxChatCompletions 10) the runner sends the results back once and ends at the
		// guard's final text.
		if strings.Join(r.Executed, ",") != "write_note,finish" || r.Text != "wrote" {
			t.Fatalf("default loop: %+v", r)
		}
		if requests != 3 || runs != 2 {
			t.Fatalf("%d requests and %d runs, want 1+2 and one per loop", requests, runs)
		}
	})
}

// The AI SDK 6 over @ai-sdk/openai-compatible: generateText, streamText and ToolLoopAgent with
// stopWhen: hasToolCall('finish') end after codellm's one step.
func TestAISDK(t *testing.T) {
	needNode(t)
	s := startServe(t)
	var r struct {
		Steps         int      `json:"steps"`
		Text          string   `json:"text"`
		Calls         []string `json:"calls"`
		StreamedCalls []string `json:"streamedCalls"`
		AgentSteps    int      `json:"agentSteps"`
		LooseSteps    int      `json:"looseSteps"`
		LooseText     string   `json:"looseText"`
		Executed      []string `json:"executed"`
	}
	s.node(t, "aisdk", &r)
	if r.Steps != 1 || r.Text != "" || strings.Join(r.Calls, ",") != "write_note,finish" ||
		strings.Join(r.StreamedCalls, ",") != "write_note,finish" || r.AgentSteps != 1 {
		t.Fatalf("%+v", r)
	}
	// With its defaults the agent sends the results back once and ends at the guard's final text.
	if r.LooseSteps != 2 || r.LooseText != "wrote" || strings.Count(strings.Join(r.Executed, ","), "write_note:a.md") != 4 {
		t.Fatalf("default agent: %+v", r)
	}
}

// POST /api/v2/execute honours Idempotency-Key like the chat route (the runner API is registered by
// serve, so it is tested here on the real binary).
func TestExecuteIdempotency(t *testing.T) {
	s := startServe(t)
	post := func(body, key string) (int, http.Header, string) {
		req, _ := http.NewRequest(http.MethodPost, s.base+"/api/v2/execute", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+apiKey)
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	random := `{"language":"python","version":"*","files":[{"content":"import os; print(os.urandom(8).hex())"}]}`
	s1, h1, b1 := post(random, "exec-1")
	s2, h2, b2 := post(random, "exec-1")
	if s1 != 200 || s2 != 200 || b1 != b2 || h1.Get("Idempotent-Replayed") != "" || h2.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("first %d %s\nsecond %d %v %s", s1, b1, s2, h2, b2)
	}
	if _, _, b3 := post(random, ""); b3 == b1 {
		t.Fatal("without a key the run repeated its random output: the replay check proves nothing")
	}
	status, _, body := post(`{"language":"python","version":"*","files":[{"content":"print(1)"}]}`, "exec-1")
	if status != 400 || !strings.Contains(body, `"error":"idempotency_key_reused"`) {
		t.Fatalf("reused key: %d %s", status, body)
	}
}

// route counts the requests the server answered on one route.
func (s *serve) route(t *testing.T, name string) int {
	return s.metric(t, `codellm_http_requests_total{code="",route="`+name+`"`)
}

// @openai/agents over the Responses API: toolUseBehavior stopAtToolNames ['finish'] ends after codellm's
// one answer; with the defaults the next turn (function_call_output items) gets the guard's final message,
// which ends the run (a reused call id would have thrown ModelBehaviorError there).
func TestOpenAIAgents(t *testing.T) {
	needNode(t)
	s := startServe(t)
	before := s.route(t, "responses")
	var r struct {
		FinalOutput string   `json:"finalOutput"`
		Executed    []string `json:"executed"`
		LooseOutput string   `json:"looseOutput"`
	}
	runs := s.runs(t)
	s.node(t, "agents", &r)
	if r.FinalOutput != "wrote" || strings.Join(r.Executed[:2], ",") != "write_note:a.md,finish:wrote" {
		t.Fatalf("%+v", r)
	}
	if r.LooseOutput != "wrote" || strings.Join(r.Executed[2:], ",") != "write_note:a.md,finish:wrote" {
		t.Fatalf("with the defaults: %+v", r)
	}
	if n := s.route(t, "responses") - before; n != 3 {
		t.Fatalf("%d Responses API requests, want 3 (one stopped run, two turns of the default one)", n)
	}
	if n := s.runs(t) - runs; n != 2 {
		t.Fatalf("the code ran %d times, want once per agent", n)
	}
}

// LangChain JS ChatOpenAI with a gpt-5* model id (whose system prompt it may send as developer):
// bindTools + invoke, stream, and a 422 surfaced as the SDK's error; its own timeout retries (every one
// with X-Stainless-Retry-Count: 0) run the code once.
func TestLangChain(t *testing.T) {
	needNode(t)
	s := startServe(t)
	var r struct {
		Calls    []string         `json:"calls"`
		Args     []map[string]any `json:"args"`
		Streamed []string         `json:"streamed"`
		Bad      nodeError        `json:"bad"`
	}
	s.node(t, "langchain", &r)
	if strings.Join(r.Calls, ",") != "write_note,finish" || r.Args[1]["answer"] != "wrote" || strings.Join(r.Streamed, ",") != "write_note,finish" ||
		r.Bad.Status != 422 || r.Bad.Code != "nonzero_exit" {
		t.Fatalf("%+v", r)
	}
	t.Logf("LangChain used chat %d times, responses %d times", s.route(t, "chat"), s.route(t, "responses"))
	var slow struct{ Answer string }
	if _, runs := s.loop(t, "langchainTimeout", &slow); slow.Answer != "slow" || runs != 1 {
		t.Fatalf("timeout retries: %+v after %d runs", slow, runs)
	}
	if s.metric(t, `codellm_idempotency_events_total{event="attached"}`)+s.metric(t, `codellm_idempotency_events_total{event="replayed"}`) < 1 {
		t.Fatal("no LangChain attempt attached to or replayed the first")
	}
}

// The AI SDK 6 over its OpenAI provider @ai-sdk/openai: openai('…') (the Responses API) and
// openai.chat('…') (chat completions), generateText and streamText with stopWhen: hasToolCall('finish'),
// each one step on its own route; a ToolLoopAgent on the Responses API stops at finish, and without it
// its second step (function_call_output items) gets the guard's finish and runs nothing.
func TestAISDKOpenAIProvider(t *testing.T) {
	needNode(t)
	s := startServe(t)
	responses, chat, runs := s.route(t, "responses"), s.route(t, "chat"), s.runs(t)
	type api struct {
		Steps         int      `json:"steps"`
		Calls         []string `json:"calls"`
		Streamed      []string `json:"streamed"`
		StreamedSteps int      `json:"streamedSteps"`
		FinishReason  string   `json:"finishReason"`
		Results       []string `json:"results"`
	}
	var r struct {
		Responses  api      `json:"responses"`
		Chat       api      `json:"chat"`
		AgentSteps int      `json:"agentSteps"`
		LooseSteps int      `json:"looseSteps"`
		LooseText  string   `json:"looseText"`
		Executed   []string `json:"executed"`
	}
	s.node(t, "aisdkOpenAI", &r)
	for name, a := range map[string]api{"responses": r.Responses, "chat": r.Chat} {
		if a.Steps != 1 || a.StreamedSteps != 1 || strings.Join(a.Calls, ",") != "write_note,finish" ||
			strings.Join(a.Streamed, ",") != "write_note,finish" || a.FinishReason != "tool-calls" || strings.Join(a.Results, ",") != "ok,wrote" {
			t.Errorf("%s: %+v", name, a)
		}
	}
	if r.AgentSteps != 1 || r.LooseSteps != 2 || r.LooseText != "wrote" || !strings.HasSuffix(strings.Join(r.Executed, ","), "write_note:a.md,finish:wrote") {
		t.Fatalf("agents: %+v", r)
	}
	// openai('…') went to /v1/responses (2 + agent 1 + loose 2), openai.chat('…') to the chat route (2);
	// the code ran once per request but the guard's answer (2 + 2 + 1 + 1).
	if n := s.route(t, "responses") - responses; n != 5 {
		t.Errorf("%d Responses API requests, want 5", n)
	}
	if n := s.route(t, "chat") - chat; n != 2 {
		t.Errorf("%d chat requests, want 2", n)
	}
	if n := s.runs(t) - runs; n != 6 {
		t.Errorf("the code ran %d times, want 6", n)
	}
}

// LangChain's createAgent (npm langchain) with finish as a returnDirect: true tool ends after the tools of
// codellm's one answer (one model request, finish's output the last message); with its defaults it asks
// again and ends at the guard's final message, without running anything.
func TestLangChainCreateAgent(t *testing.T) {
	needNode(t)
	s := startServe(t)
	chat, runs := s.route(t, "chat"), s.runs(t)
	var r struct {
		Messages []string `json:"messages"`
		Last     struct {
			Type, Name, Content string
		} `json:"last"`
		Stopped       []string `json:"stopped"`
		Loose         []string `json:"loose"`
		LooseMessages []string `json:"looseMessages"`
		LooseLast     struct{ Type, Content string }
	}
	s.node(t, "langchainAgent", &r)
	if strings.Join(r.Messages, ",") != "human,ai,tool,tool" || r.Last.Name != "finish" || r.Last.Content != "wrote" ||
		strings.Join(r.Stopped, ",") != "write_note:a.md,finish:wrote" {
		t.Fatalf("returnDirect: %+v", r)
	}
	if strings.Join(r.Loose, ",") != "write_note:a.md,finish:wrote" || strings.Join(r.LooseMessages, ",") != "human,ai,tool,tool,ai" ||
		r.LooseLast.Type != "ai" || r.LooseLast.Content != "wrote" {
		t.Fatalf("with the defaults: %+v", r)
	}
	// One request for the stopped agent, two for the default one (its second gets the guard's final
	// message); the code ran once per agent.
	if n := s.route(t, "chat") - chat; n != 3 {
		t.Errorf("%d chat requests, want 3", n)
	}
	if n := s.runs(t) - runs; n != 2 {
		t.Errorf("the code ran %d times, want 2", n)
	}
}

// loop runs one scenario and returns how many requests it sent (chat and Responses routes together) and
// how many times the code ran.
func (s *serve) loop(t *testing.T, scenario string, out any) (requests, runs int) {
	t.Helper()
	requests, runs = s.route(t, "chat")+s.route(t, "responses"), s.runs(t)
	s.node(t, scenario, out)
	return s.route(t, "chat") + s.route(t, "responses") - requests, s.runs(t) - runs
}

// Every agent framework, with its default settings and no codellm-specific option, ends after two
// requests and one run: the first runs the code and answers with the calls, the second sends the tool
// results back and gets the re-execution guard's final message (the run's finish answer, no tool calls).
// Each executes write_note and finish once — but Strands' chat-completions adapter, which keeps only the
// last of several streamed calls (its bug; its default, the Responses API, keeps them all).
func TestDefaultAgentLoops(t *testing.T) {
	needNode(t)
	s := startServe(t)
	for _, tc := range []struct {
		scenario, executed string
	}{
		{"runTools7", "write_note,finish"}, // openai-node 7's runner
		{"mastra", "write_note:a.md,finish:wrote"},
		{"llamaindex", "write_note:a.md,finish:wrote"},
		{"piagent", "write_note:a.md,finish:wrote"},
		{"genkit", "write_note:a.md,finish:wrote"},
		{"voltagent", "write_note:a.md,finish:wrote"},
		{"strands", "write_note:a.md,finish:wrote"},
		{"strandsChat", "finish:wrote"},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			var r struct {
				Executed []string `json:"executed"`
				Text     string   `json:"text"`
			}
			requests, runs := s.loop(t, tc.scenario, &r)
			if requests != 2 || runs != 1 {
				t.Errorf("%d requests and %d runs, want 2 and 1", requests, runs)
			}
			if strings.Join(r.Executed, ",") != tc.executed || r.Text != "wrote" {
				t.Errorf("executed %v, final text %q; want %s and wrote", r.Executed, r.Text, tc.executed)
			}
		})
	}
}
