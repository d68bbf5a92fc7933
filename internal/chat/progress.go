package chat

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/codellm/codellm/internal/pipeline"
)

// Default keep-alive timing of a streaming chat request whose run is still going: the first comment after
// DefaultKeepAliveAfter without an answer, then one every DefaultKeepAliveEvery.
const (
	DefaultKeepAliveAfter = 5 * time.Second
	DefaultKeepAliveEvery = 15 * time.Second
)

// progressStream stands in for the ResponseWriter of a streaming chat request while its run goes. A run
// may last minutes and a stream used to stay silent until it ended, so clients and proxies with a shorter
// idle timeout gave up. After KeepAliveAfter without an answer it commits to the 200 event stream and
// sends an SSE comment (": keep-alive") every KeepAliveEvery; with x_codellm_progress it commits at the
// first block and sends each block's start and exit as comments (": codellm {…}"). SSE parsers skip
// comment lines, so an OpenAI client sees exactly the events it would without them.
//
// Once the stream is committed the answer can no longer choose its status: the chunks follow as usual,
// and an error is sent as the event `data: {"error":{…}}` and `data: [DONE]`, which OpenAI's clients
// raise as the API error it holds.
type progressStream struct {
	w        http.ResponseWriter
	events   chan string
	stop     chan struct{}
	done     chan struct{}
	mu       sync.Mutex
	started  bool // the 200 and the event-stream headers are out
	replied  bool // the answer began before the stream was committed: no comment may follow
	errorOut bool // the answer is an error: its body becomes one data event
}

// newProgressStream starts the keep-alive timer; close it before the answer is written.
func newProgressStream(w http.ResponseWriter, after, every time.Duration) *progressStream {
	p := &progressStream{w: w, events: make(chan string, 64), stop: make(chan struct{}), done: make(chan struct{})}
	go p.loop(after, every)
	return p
}

func (p *progressStream) loop(after, every time.Duration) {
	defer close(p.done)
	t := time.NewTimer(after)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case ev := <-p.events:
			p.comment("codellm " + ev)
		case <-t.C:
			p.comment("keep-alive")
			t.Reset(every)
		}
	}
}

// progress is pipeline.Request.Progress: it queues the block's event and never blocks the run (an event
// the writer is too slow for is dropped).
func (p *progressStream) progress(ev pipeline.Progress) {
	body := map[string]any{"event": "block_start", "block": ev.Index, "blocks": ev.Blocks}
	if ev.Exited {
		body["event"], body["exit_code"], body["wall_ms"] = "block_exit", ev.ExitCode, ev.Wall.Milliseconds()
		if ev.Signal != "" {
			body["exit_code"], body["signal"] = nil, ev.Signal
		}
	}
	b, _ := json.Marshal(body)
	select {
	case p.events <- string(b):
	default:
	}
}

// comment commits the stream if it is not yet and writes one comment line.
func (p *progressStream) comment(text string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.replied {
		return
	}
	if !p.started {
		h := p.w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Accel-Buffering", "no")
		p.w.WriteHeader(http.StatusOK)
		p.started = true
	}
	fmt.Fprintf(p.w, ": %s\n\n", text)
	p.flush()
}

func (p *progressStream) flush() {
	_ = http.NewResponseController(p.w).Flush()
}

// close stops the timer and waits for a comment being written; the answer follows through p.
func (p *progressStream) close() {
	close(p.stop)
	<-p.done
}

// progressKey carries a streaming request's progress callback from Converse to the run (withProgress).
type progressKey struct{}

func withProgress(ctx context.Context, fn func(pipeline.Progress)) context.Context {
	return context.WithValue(ctx, progressKey{}, fn)
}

// progressFrom is the callback withProgress recorded, or nil.
func progressFrom(ctx context.Context) func(pipeline.Progress) {
	fn, _ := ctx.Value(progressKey{}).(func(pipeline.Progress))
	return fn
}

func (p *progressStream) Header() http.Header { return p.w.Header() }

// WriteHeader passes the status on before the stream is committed; after, an error status turns the body
// into an error event and every status is dropped (the 200 is out).
func (p *progressStream) WriteHeader(code int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.started {
		p.replied = true
		p.w.WriteHeader(code)
		return
	}
	p.errorOut = code >= 400
}

func (p *progressStream) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.started {
		p.replied = true
		return p.w.Write(b)
	}
	if !p.errorOut {
		return p.w.Write(b)
	}
	if _, err := fmt.Fprintf(p.w, "data: %s\n\ndata: [DONE]\n\n", compactJSON(b)); err != nil {
		return 0, err
	}
	return len(b), nil
}

// Flush and Unwrap let http.NewResponseController reach the connection.
func (p *progressStream) Flush()                      { p.flush() }
func (p *progressStream) Unwrap() http.ResponseWriter { return p.w }

// compactJSON is an error body on one line (an SSE data line cannot hold a newline).
func compactJSON(b []byte) []byte {
	var out []byte
	if v := json.RawMessage(b); json.Valid(v) {
		if c, err := json.Marshal(v); err == nil {
			return c
		}
	}
	for _, c := range b {
		if c != '\n' && c != '\r' {
			out = append(out, c)
		}
	}
	return out
}
