package chat

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/codellm/codellm/internal/engine"
	"github.com/codellm/codellm/internal/interp"
	"github.com/codellm/codellm/internal/pipeline"
	"github.com/codellm/codellm/internal/sandbox"
)

// streamServer serves the chat core over HTTP with the sandbox off (these tests are about the stream, not
// the confinement) and keep-alives every 20 ms.
func streamServer(t *testing.T) string {
	sb, err := sandbox.New(sandbox.Config{Mode: sandbox.ModeOff})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close() })
	programs, err := interp.Enable(interp.Builtin(), []string{"bash"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	eng := engine.New(engine.Config{Programs: programs, Pipeline: pipeline.Config{Sandbox: sb, WorkRoot: t.TempDir()},
		Timeout: 20 * time.Second, MaxBlocks: 8}, nil)
	s := New(Config{Engine: eng, KeepAliveAfter: 20 * time.Millisecond, KeepAliveEvery: 20 * time.Millisecond})
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return srv.URL
}

// waitFor is a bash line that waits until the test creates flag (the block cannot end before the test has
// seen what it waits for: no timing in the assertion).
func waitFor(flag string) string {
	return `while [ ! -e ` + flag + ` ]; do sleep 0.02; done`
}

func chatBody(blocks ...string) string {
	var content strings.Builder
	for _, b := range blocks {
		content.WriteString("```bash\n" + b + "\n```\n")
	}
	msg, _ := json.Marshal(content.String())
	return `{"model":"codellm","stream":true,"messages":[{"role":"user","content":` + string(msg) + `}]`
}

// readUntil reads SSE lines until one contains want, and returns every line read.
func readUntil(t *testing.T, sc *bufio.Scanner, want string) []string {
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if strings.Contains(sc.Text(), want) {
			return lines
		}
	}
	t.Fatalf("the stream ended without %q:\n%s", want, strings.Join(lines, "\n"))
	return nil
}

func openStream(t *testing.T, url, body string) (*http.Response, *bufio.Scanner) {
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp, bufio.NewScanner(resp.Body)
}

// Issue 41: a streaming request showed nothing until its run ended, and clients or proxies with a shorter
// idle timeout gave up. Keep-alive comments now come while the block runs (it waits until the test has
// seen one), and the answer follows as usual.
func TestStreamKeepAlive(t *testing.T) {
	url := streamServer(t)
	flag := filepath.Join(t.TempDir(), "go")
	resp, sc := openStream(t, url, chatBody(waitFor(flag)+`; echo '{"answer":"late"}'`)+"}")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	readUntil(t, sc, ": keep-alive")
	os.WriteFile(flag, nil, 0o644)
	lines := readUntil(t, sc, "data: [DONE]")
	all := strings.Join(lines, "\n")
	if !strings.Contains(all, `\"answer\":\"late\"`) || !strings.Contains(all, `"finish_reason":"tool_calls"`) {
		t.Fatalf("the answer after the keep-alives:\n%s", all)
	}
}

// The official client reads through the comments: the same calls as without them, and a run that fails
// after the stream was committed reaches it as the API error (an error event), not a broken stream.
func TestStreamClientIgnoresComments(t *testing.T) {
	url := streamServer(t)
	client := oai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	run := func(code string) (string, error) {
		stream := client.Chat.Completions.NewStreaming(context.Background(), oai.ChatCompletionNewParams{
			Model: "codellm", Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("```bash\n" + code + "\n```")}})
		var acc oai.ChatCompletionAccumulator
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		if err := stream.Err(); err != nil {
			return "", err
		}
		return acc.Choices[0].Message.ToolCalls[0].Function.Arguments, nil
	}
	// Sleeping past several keep-alive periods; the test cannot see the comments here, only that they
	// do not disturb the client (TestStreamKeepAlive shows they are sent).
	args, err := run(`sleep 0.3; echo '{"answer":"slow"}'`)
	if err != nil || args != `{"answer":"slow"}` {
		t.Fatalf("slow run through the client: %q, %v", args, err)
	}
	_, err = run(`sleep 0.3; echo boom >&2; exit 3`)
	if err == nil || !strings.Contains(err.Error(), "non-zero exit (code 3): boom") {
		t.Fatalf("a failure after the stream was committed: %v", err)
	}
}

// x_codellm_progress: every block's start, then each one's exit, as comments, while the run goes.
func TestStreamProgressEvents(t *testing.T) {
	url := streamServer(t)
	flag := filepath.Join(t.TempDir(), "go")
	body := chatBody(waitFor(flag)+"; echo x", `cat >/dev/null; echo '{"answer":"two"}'`) + `,"x_codellm_progress":true}`
	_, sc := openStream(t, url, body)
	seen := strings.Join(readUntil(t, sc, `"block":1,"blocks":2,"event":"block_start"`), "\n")
	if !strings.Contains(seen, `: codellm {"block":0,"blocks":2,"event":"block_start"}`) {
		t.Fatalf("block 0's start:\n%s", seen)
	}
	os.WriteFile(flag, nil, 0o644)
	rest := strings.Join(readUntil(t, sc, "data: [DONE]"), "\n")
	for _, want := range []string{`"event":"block_exit"`, `"block":0`, `"block":1`, `"exit_code":0`, `\"answer\":\"two\"`} {
		if !strings.Contains(rest, want) {
			t.Fatalf("after the flag, %q is missing:\n%s", want, rest)
		}
	}
}
