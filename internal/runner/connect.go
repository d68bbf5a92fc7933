package runner

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"
	"golang.org/x/sys/unix"

	"github.com/codellm/codellm/internal/execution"
	"github.com/codellm/codellm/internal/interp"
	"github.com/codellm/codellm/internal/sandbox"
	"github.com/codellm/codellm/internal/slots"
)

// PathConnect is Piston's interactive endpoint: a WebSocket over which one execute runs with its stdin
// fed and its stdout and stderr streamed as they come (engineer-man/piston, api/src/api/v2.js).
const PathConnect = "/api/v2/connect"

// Piston's close codes of the connection.
const (
	closeCompleted      websocket.StatusCode = 4999 // "Job Completed"
	closeAlreadyInit    websocket.StatusCode = 4000
	closeInitTimeout    websocket.StatusCode = 4001
	closeNotifiedError  websocket.StatusCode = 4002 // after an "error" message
	closeNotInitialized websocket.StatusCode = 4003
	closeStdinOnly      websocket.StatusCode = 4004
	closeInvalidSignal  websocket.StatusCode = 4005
)

// connectInitTimeout is how long a connection may stay without its init message (Piston: 1 s).
const connectInitTimeout = time.Second

// connectMessage is one message of the protocol, either way. An init carries an execute request's members
// beside "type" (decoded from the same bytes).
type connectMessage struct {
	Type     string  `json:"type"`
	Stream   string  `json:"stream,omitempty"`
	Data     string  `json:"data,omitempty"`
	Signal   *string `json:"signal,omitempty"`
	Stage    string  `json:"stage,omitempty"`
	Language string  `json:"language,omitempty"`
	Version  string  `json:"version,omitempty"`
	Code     *int    `json:"code,omitempty"`
	Message  string  `json:"message,omitempty"`
}

// exitMessage is the "exit" message: code and signal are both present, one of them null (Piston's run
// object).
type exitMessage struct {
	Type   string  `json:"type"`
	Stage  string  `json:"stage"`
	Code   *int    `json:"code"`
	Signal *string `json:"signal"`
}

// connection is one interactive execute: the socket, and what the running stage needs from it.
type connection struct {
	r      *Runner
	c      *websocket.Conn
	ctx    context.Context
	wmu    sync.Mutex // one writer at a time on the socket
	msgs   chan connectMessage
	closed chan struct{} // the client went away or broke the protocol
}

// handleConnect serves PathConnect: the init message within a second (close 4001 otherwise), then a
// "runtime" message, each stage's "stage", its output as "data" messages and its "exit"; stdin and
// signals from the client reach the program while it runs. The connection closes with 4999 when the run
// is over; a bad request is an "error" message and 4002.
func (r *Runner) handleConnect(w http.ResponseWriter, req *http.Request) {
	c, err := websocket.Accept(w, req, nil)
	if err != nil {
		return // Accept has answered
	}
	c.SetReadLimit(int64(r.cfg.MaxBodyBytes) + 1<<10)
	ctx, cancel := context.WithCancel(req.Context())
	cn := &connection{r: r, c: c, ctx: ctx, msgs: make(chan connectMessage, 16), closed: make(chan struct{})}
	init := make(chan []byte, 1)
	go cn.read(init)
	defer func() { cancel(); c.CloseNow(); <-cn.closed }() // the reader ends with the connection
	select {
	case body := <-init:
		cn.serve(body)
	case <-time.After(connectInitTimeout):
		c.Close(closeInitTimeout, "Initialization Timeout")
	case <-cn.closed:
		c.CloseNow()
	}
}

// read receives every message: the first init goes to init, the others to msgs; a second init, or data or
// a signal before the init, closes the connection as Piston does.
func (cn *connection) read(init chan<- []byte) {
	defer close(cn.closed)
	initialized := false
	for {
		_, b, err := cn.c.Read(cn.ctx)
		if err != nil {
			return
		}
		var m connectMessage
		if err := json.Unmarshal(b, &m); err != nil {
			cn.fail("invalid JSON: " + err.Error())
			return
		}
		switch {
		case m.Type == "init" && initialized:
			cn.c.Close(closeAlreadyInit, "Already Initialized")
			return
		case m.Type == "init":
			initialized = true
			init <- b
		case !initialized && (m.Type == "data" || m.Type == "signal"):
			cn.c.Close(closeNotInitialized, "Not yet initialized")
			return
		case m.Type == "data" && m.Stream != "stdin":
			cn.c.Close(closeStdinOnly, "Can only write to stdin")
			return
		case m.Type == "signal" && (m.Signal == nil || unix.SignalNum(*m.Signal) == 0):
			cn.c.Close(closeInvalidSignal, "Invalid signal")
			return
		case m.Type == "data" || m.Type == "signal":
			select {
			case cn.msgs <- m:
			case <-cn.ctx.Done():
				return
			}
		}
	}
}

// send writes one message (errors mean the client is gone; the run is cancelled through ctx).
func (cn *connection) send(v any) {
	b, _ := json.Marshal(v)
	cn.wmu.Lock()
	defer cn.wmu.Unlock()
	_ = cn.c.Write(cn.ctx, websocket.MessageText, b)
}

// fail reports a refusal as an "error" message and closes with 4002.
func (cn *connection) fail(msg string) {
	cn.send(connectMessage{Type: "error", Message: msg})
	cn.c.Close(closeNotifiedError, "Notified Error")
}

// serve runs the init's execute. The run lives in a fresh workspace of its own (no session: Piston's
// connections have none) and holds a slot, like POST /api/v2/execute.
func (cn *connection) serve(body []byte) {
	r := cn.r
	var er ExecuteRequest
	if e := decodeRequest(body, &er); e != nil {
		cn.fail(e.Message)
		return
	}
	p, e := r.prepare(&er)
	if e != nil {
		cn.fail(e.Message)
		return
	}
	dir, e := cn.workspace()
	if e != nil {
		cn.fail(e.Message)
		return
	}
	defer r.removeLater(dir)
	release, _, err := r.cfg.Slots.Acquire(cn.ctx)
	if err != nil {
		msg := "the connection ended while waiting for a slot"
		if errors.Is(err, slots.ErrBusy) {
			msg = "all execution slots are busy; retry later"
		}
		cn.fail(msg)
		return
	}
	defer release()
	cn.send(connectMessage{Type: "runtime", Language: p.rt.Language, Version: p.rt.Version})
	if e := cn.execute(dir, p); e != nil {
		cn.fail(e.Message)
		return
	}
	cn.c.Close(closeCompleted, "Job Completed")
}

// workspace makes the connection's one-off workspace.
func (cn *connection) workspace() (string, *Error) {
	r := cn.r
	r.mu.Lock()
	r.seq++
	dir := filepath.Join(r.runsDir, "connect-"+strconv.FormatUint(r.seq, 10))
	r.mu.Unlock()
	if err := r.makeWorkspace(dir); err != nil {
		return "", sandboxFailed("cannot create a workspace: "+err.Error(), err)
	}
	return dir, nil
}

// execute writes the files, compiles when the language does (its result as one stage) and runs the
// program interactively.
func (cn *connection) execute(dir string, p *prepared) *Error {
	r := cn.r
	if e, err := writeFiles(dir, p.files); e != nil {
		return e
	} else if err != nil {
		return sandboxFailed("writing the request's files failed: "+err.Error(), err)
	}
	run, err := r.oneBlockRun(r.runLimits(p.memory, p.cpu))
	if err != nil {
		return sandboxFailed("sandbox: "+err.Error(), err)
	}
	defer run.CloseLater()
	ws, e := r.openWorkspace(nil, dir, run)
	if e != nil {
		return e
	}
	defer ws.close()
	in := run.Workdir(dir, WorkDir)
	env := append(interp.Env(in, p.rt.interp, r.cfg.Exposed), p.env...)
	if p.rt.interp.Compiled() {
		cn.send(connectMessage{Type: "stage", Stage: "compile"})
		st, ok, e := r.compile(cn.ctx, ws, in, p, env)
		if e != nil {
			return e
		}
		cn.sendOutput("stdout", []byte(st.Stdout))
		cn.sendOutput("stderr", []byte(st.Stderr))
		cn.send(exitMessage{Type: "exit", Stage: "compile", Code: st.Code, Signal: st.Signal})
		if !ok {
			return nil
		}
	}
	path, argv, err := runArgv(p, in, entry(in, p))
	if err != nil {
		return sandboxFailed("cannot find the program to run: "+err.Error(), err)
	}
	spec, _ := ws.spec(sandbox.Spec{Path: path, Args: argv, Env: env, Deterministic: p.det}, false)
	cn.send(connectMessage{Type: "stage", Stage: "run"})
	return cn.interact(run, spec, p.timeout)
}

// interact starts the run stage with its stdin, stdout and stderr on pipes, relays them and the client's
// signals until the program ends (or the timeout, the output cap or the client's going kills it), then
// sends the "exit" message.
func (cn *connection) interact(run *sandbox.Run, spec sandbox.Spec, timeout time.Duration) *Error {
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		return sandboxFailed("cannot prepare stdin: "+err.Error(), err)
	}
	defer stdinW.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		stdinR.Close()
		return sandboxFailed("cannot prepare stdout: "+err.Error(), err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		stdinR.Close()
		outR.Close()
		outW.Close()
		return sandboxFailed("cannot prepare stderr: "+err.Error(), err)
	}
	spec.Stdin, spec.Stdout, spec.Stderr = stdinR, outW, errW
	proc, err := run.Start(spec)
	stdinR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return sandboxFailed("sandbox: "+err.Error(), err)
	}
	budget := &outputBudget{left: cn.r.cfg.MaxOutputBytes, over: func() { proc.Kill() }}
	var relays sync.WaitGroup
	for _, s := range []struct {
		name string
		f    *os.File
	}{{"stdout", outR}, {"stderr", errR}} {
		relays.Add(1)
		go func() { defer relays.Done(); defer s.f.Close(); cn.relay(s.name, s.f, budget) }()
	}
	waited := make(chan sandbox.Result, 1)
	go func() { waited <- proc.Wait() }()
	res := cn.supervise(proc, stdinW, waited, timeout)
	relays.Wait()
	cn.send(exitOf(res))
	return nil
}

// supervise feeds stdin and signals to proc until it ends, enforcing the timeout (SIGTERM, then SIGKILL
// after sandbox.TermGrace) and killing it when the client goes away.
func (cn *connection) supervise(proc *sandbox.Process, stdin *os.File, waited <-chan sandbox.Result, timeout time.Duration) sandbox.Result {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	var killAfter <-chan time.Time
	closed := cn.closed
	for {
		select {
		case res := <-waited:
			return res
		case m := <-cn.msgs:
			if m.Type == "data" {
				_, _ = io.WriteString(stdin, m.Data)
			} else {
				proc.Signal(unix.SignalNum(*m.Signal))
			}
		case <-deadline.C:
			proc.Terminate()
			killAfter = time.After(sandbox.TermGrace)
		case <-killAfter:
			proc.Kill()
		case <-closed:
			closed = nil
			proc.Kill()
		}
	}
}

// relay sends what f yields as "data" messages of stream, within the shared output budget.
func (cn *connection) relay(stream string, f *os.File, budget *outputBudget) {
	buf := make([]byte, 32<<10)
	var pending []byte // an incomplete UTF-8 sequence at the end of the last read
	for {
		n, err := f.Read(buf)
		if n > 0 {
			chunk := budget.take(append(pending, buf[:n]...))
			pending = nil
			if cut := incompleteTail(chunk); cut > 0 {
				chunk, pending = chunk[:len(chunk)-cut], append([]byte(nil), chunk[len(chunk)-cut:]...)
			}
			cn.sendOutput(stream, chunk)
		}
		if err != nil {
			cn.sendOutput(stream, pending)
			return
		}
	}
}

func (cn *connection) sendOutput(stream string, b []byte) {
	if len(b) > 0 {
		cn.send(connectMessage{Type: "data", Stream: stream, Data: string(b)})
	}
}

// incompleteTail is how many bytes at the end of b begin a UTF-8 sequence that b does not finish.
func incompleteTail(b []byte) int {
	for i := 1; i <= 3 && i <= len(b); i++ {
		c := b[len(b)-i]
		if utf8.RuneStart(c) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return i
			}
			return 0
		}
	}
	return 0
}

// outputBudget is the run's output cap, stdout and stderr together: past it the program is killed and
// nothing more is sent (POST /execute's OL/EL).
type outputBudget struct {
	mu   sync.Mutex
	left int64
	over func()
}

func (b *outputBudget) take(p []byte) []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	if int64(len(p)) <= b.left {
		b.left -= int64(len(p))
		return p
	}
	p = p[:max(b.left, 0)]
	if b.left >= 0 {
		b.over()
	}
	b.left = -1
	return p
}

// exitOf is the "exit" message of a finished run stage.
func exitOf(res sandbox.Result) exitMessage {
	m := exitMessage{Type: "exit", Stage: "run"}
	if res.Signal != 0 {
		s := execution.SignalName(res.Signal)
		m.Signal = &s
	} else {
		code := res.ExitCode
		m.Code = &code
	}
	return m
}
