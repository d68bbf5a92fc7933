//go:build linux

package sandbox

import (
	"os"
	"runtime"
	"sync"
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
