package runner

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// dialConnect opens /api/v2/connect on a real listener serving the runner.
func dialConnect(t *testing.T, tr *testRunner) (*websocket.Conn, context.Context) {
	srv := httptest.NewServer(tr.h)
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+PathConnect, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	return c, ctx
}

func sendJSON(t *testing.T, ctx context.Context, c *websocket.Conn, v string) {
	if err := c.Write(ctx, websocket.MessageText, []byte(v)); err != nil {
		t.Fatal(err)
	}
}

// next reads messages until one of type typ (the ones before it are returned too).
func next(t *testing.T, ctx context.Context, c *websocket.Conn, typ string) (map[string]any, []map[string]any) {
	var seen []map[string]any
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			t.Fatalf("waiting for %q after %v: %v", typ, seen, err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("not JSON: %q", b)
		}
		if m["type"] == typ {
			return m, seen
		}
		seen = append(seen, m)
	}
}

// closeCode waits for the server's close and returns its code and reason.
func closeCode(ctx context.Context, c *websocket.Conn) (websocket.StatusCode, string) {
	for {
		if _, _, err := c.Read(ctx); err != nil {
			var ce websocket.CloseError
			if errors.As(err, &ce) {
				return ce.Code, ce.Reason
			}
			return -1, err.Error()
		}
	}
}

// Piston's own interactive example (engineer-man/piston readme, "Interactive execution endpoint"): init
// `cat`, the runtime and stage messages, stdin in and the same bytes out as stdout, then a signal ends it
// with an exit message naming the signal, and the connection closes 4999 "Job Completed".
func TestConnectPistonExample(t *testing.T) {
	tr := newRunner(t, nil)
	c, ctx := dialConnect(t, tr)
	sendJSON(t, ctx, c, `{"type":"init", "language":"bash", "version":"*", "files":[{"content": "cat"}]}`)
	if rt, _ := next(t, ctx, c, "runtime"); rt["language"] != "bash" || rt["version"] == "" {
		t.Fatalf("runtime message %v", rt)
	}
	if st, _ := next(t, ctx, c, "stage"); st["stage"] != "run" {
		t.Fatalf("stage message %v", st)
	}
	sendJSON(t, ctx, c, `{"type":"data", "stream":"stdin", "data":"Hello World!"}`)
	if d, _ := next(t, ctx, c, "data"); d["stream"] != "stdout" || d["data"] != "Hello World!" {
		t.Fatalf("data message %v", d)
	}
	sendJSON(t, ctx, c, `{"type":"signal", "signal":"SIGKILL"}`)
	exit, _ := next(t, ctx, c, "exit")
	if exit["stage"] != "run" || exit["code"] != nil || exit["signal"] != "SIGKILL" {
		t.Fatalf("exit message %v", exit)
	}
	if code, reason := closeCode(ctx, c); code != 4999 || reason != "Job Completed" {
		t.Fatalf("close %d %q", code, reason)
	}
}

// Output streams as the program writes it (the second line is asked for only after the first arrived),
// stderr is its own stream, and a normal exit reports its code.
func TestConnectStreamsAndExits(t *testing.T) {
	tr := newRunner(t, nil)
	c, ctx := dialConnect(t, tr)
	sendJSON(t, ctx, c, `{"type":"init","language":"python","version":"*","files":[{"content":"import sys\nprint('first', flush=True)\nname = sys.stdin.readline().strip()\nprint('hello ' + name, file=sys.stderr, flush=True)\nsys.exit(3)\n"}]}`)
	if d, _ := next(t, ctx, c, "data"); d["stream"] != "stdout" || d["data"] != "first\n" {
		t.Fatalf("first line %v", d)
	}
	sendJSON(t, ctx, c, `{"type":"data","stream":"stdin","data":"codellm\n"}`)
	if d, _ := next(t, ctx, c, "data"); d["stream"] != "stderr" || d["data"] != "hello codellm\n" {
		t.Fatalf("stderr line %v", d)
	}
	if exit, _ := next(t, ctx, c, "exit"); exit["code"] != float64(3) || exit["signal"] != nil {
		t.Fatalf("exit %v", exit)
	}
}

// The protocol's refusals, with Piston's close codes.
func TestConnectRefusals(t *testing.T) {
	tr := newRunner(t, nil)
	for _, c := range []struct {
		name   string
		msgs   []string
		code   websocket.StatusCode
		errMsg string
	}{
		{"no init within a second", nil, 4001, ""},
		{"data before init", []string{`{"type":"data","stream":"stdin","data":"x"}`}, 4003, ""},
		{"unknown runtime", []string{`{"type":"init","language":"cobol","version":"*","files":[{"content":"x"}]}`}, 4002, "cobol-* runtime is unknown"},
		{"write to stdout", []string{`{"type":"init","language":"bash","version":"*","files":[{"content":"cat"}]}`, `{"type":"data","stream":"stdout","data":"x"}`}, 4004, ""},
		{"bad signal", []string{`{"type":"init","language":"bash","version":"*","files":[{"content":"cat"}]}`, `{"type":"signal","signal":"SIGNOPE"}`}, 4005, ""},
		{"second init", []string{`{"type":"init","language":"bash","version":"*","files":[{"content":"cat"}]}`, `{"type":"init","language":"bash","version":"*","files":[{"content":"cat"}]}`}, 4000, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, ctx := dialConnect(t, tr)
			for _, m := range c.msgs {
				sendJSON(t, ctx, conn, m)
			}
			if c.errMsg != "" {
				if e, _ := next(t, ctx, conn, "error"); !strings.Contains(e["message"].(string), c.errMsg) {
					t.Fatalf("error message %v", e)
				}
			}
			if code, reason := closeCode(ctx, conn); code != c.code {
				t.Fatalf("close %d %q, want %d", code, reason, c.code)
			}
		})
	}
}
