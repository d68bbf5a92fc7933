//go:build linux

package sandbox

import (
	"errors"
	"os"
	"runtime"
	"sync"
	"syscall"

	"github.com/codellm/codellm/internal/sandbox/hook"
	"github.com/codellm/codellm/internal/sandbox/spawner"
)

// The kernel sends the parent-death signal (SysProcAttr.Pdeathsig, which
// makes every block die with codellm) when the parent *thread* exits, not
// the process. The Go runtime ends a thread when a goroutine locked to it
// returns without unlocking, so a helper started from an arbitrary thread
// could be killed for no reason. Helpers are therefore started from a few
// goroutines locked, for the life of the process, to their own threads.
const spawnThreads = 4

type spawnReq struct {
	path string
	argv []string
	attr *os.ProcAttr
	res  chan spawnRes
}

type spawnRes struct {
	p   *os.Process
	err error
}

var spawnQueue = sync.OnceValue(func() chan spawnReq {
	ch := make(chan spawnReq)
	for range spawnThreads {
		go spawnLoop(ch)
	}
	return ch
})

func spawnLoop(ch chan spawnReq) {
	runtime.LockOSThread() // never unlocked: this thread must outlive every child it starts
	for req := range ch {
		p, err := os.StartProcess(req.path, req.argv, req.attr)
		req.res <- spawnRes{p, err}
	}
}

// startOnStableThread is os.StartProcess from one of the locked threads.
func startOnStableThread(path string, argv []string, attr *os.ProcAttr) (*os.Process, error) {
	res := make(chan spawnRes, 1)
	spawnQueue() <- spawnReq{path, argv, attr, res}
	r := <-res
	return r.p, r.err
}

// helperArgv is every helper's argv: argv[1] is the marker package hook
// recognises.
var helperArgv = []string{"codellm-sandbox", hook.Marker}

// maxSpawnerStarts bounds how often a Sandbox replaces a spawner that died;
// after that its helpers are cloned from the server directly.
const maxSpawnerStarts = 3

// helperSpawner is a Sandbox's spawner (package spawner): a small process,
// started with the first helper that needs a new user namespace, that
// clones helpers so that the server never forks its own address space.
// Without one (it could not start, died too often, or the Sandbox is
// closed) helpers are cloned from the server as before: slower, not less
// confined.
type helperSpawner struct {
	mu     sync.Mutex
	sp     *spawner.Spawner
	starts int
	closed bool
}

// startHelper clones a block helper with the given environment,
// descriptors and clone attributes: through the Sandbox's spawner when the
// clone makes a user namespace (Go forks, rather than vforks, only those),
// otherwise, or when the spawner cannot take it, from a locked server
// thread.
func (p *platform) startHelper(env []string, files []*os.File, attr *syscall.SysProcAttr) (*os.Process, error) {
	if attr.Cloneflags&syscall.CLONE_NEWUSER != 0 {
		if sp := p.spawner.get(p.helperPath); sp != nil {
			osp, err := sp.Spawn(env, files, attr)
			switch {
			case errors.Is(err, spawner.ErrClosed):
				p.spawner.drop(sp)
			case !errors.Is(err, spawner.ErrUnsupported):
				return osp, err
			}
		}
	}
	return startOnStableThread(p.helperPath, helperArgv, &os.ProcAttr{Env: env, Files: files, Sys: attr})
}

// get returns the running spawner, starting one if there is none; nil when
// helpers should be cloned directly.
func (h *helperSpawner) get(self string) *spawner.Spawner {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || helperFile == nil {
		return nil
	}
	if h.sp == nil && h.starts < maxSpawnerStarts {
		h.starts++
		if sp, err := spawner.Start(startOnStableThread, self, helperFile, helperArgv); err == nil {
			h.sp = sp
		}
	}
	return h.sp
}

// drop forgets a spawner that failed (it is closed and reaped already).
func (h *helperSpawner) drop(sp *spawner.Spawner) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sp == sp {
		h.sp = nil
	}
}

// close ends the spawner; helpers started afterwards are cloned directly.
func (h *helperSpawner) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	if h.sp != nil {
		_ = h.sp.Close()
		h.sp = nil
	}
}
