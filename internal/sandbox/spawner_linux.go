//go:build linux

package sandbox

import (
	"errors"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/codellm/codellm/internal/sandbox/hook"
	"github.com/codellm/codellm/internal/sandbox/mount"
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

// maxSpawnerFailures bounds how many spawners a Sandbox may lose (a start
// that failed, or one that died); after that no more are started, and once
// none is left its helpers are cloned from the server directly.
const maxSpawnerFailures = 3

// maxSpawners is how many spawners a Sandbox runs at most. A spawner answers
// one request at a time, so its loop (the request's decode, the compile, the
// clone with its namespaces, the helper forked ahead) is a serial section of
// every block's start: about a millisecond per block, which alone bounded a
// 16-core host to ~640 blocks a second (BENCHMARKS.md, "scaling"). One more
// is started whenever every running one is busy, up to one per four CPUs:
// on the 2-CPU development machine that is one, as before.
func maxSpawners() int { return max(1, runtime.GOMAXPROCS(0)/4) }

// helperSpawner is a Sandbox's spawners (package spawner): small processes,
// started as blocks need them, that clone helpers so that the server never
// forks its own address space. Each serves one block at a time; a block
// takes a free one, or starts one more (up to maxSpawners), or waits for
// one. Without any (none could start, too many died, or the Sandbox is
// closed) helpers are cloned from the server as before: slower, not less
// confined.
type helperSpawner struct {
	mu       sync.Mutex
	handed   *sync.Cond     // a spawner came back, or one ended
	free     []*liveSpawner // running and not lent
	all      []*liveSpawner // running, lent or not
	max      int            // maxSpawners, or a test's
	starting int            // starts under way (they count against max)
	failures int            // see maxSpawnerFailures
	closed   bool
	overlay  []spawner.OverlayDir // see Sandbox.spawnerOverlay
	log      *slog.Logger
	told     bool // the log has the spawner's reason for directories it did not overlay
	// replaced counts replacements under way (replace), for close.
	replaced sync.WaitGroup
	gone     spawner.Stats // the counters of spawners already closed
	waited   time.Duration // blocks' waits for a free spawner
}

// liveSpawner is one running spawner of the pool.
type liveSpawner struct {
	sp        *spawner.Spawner
	born      time.Time // when it started (its overlays' age)
	replacing bool      // a replacement is being started (replace)
	retired   bool      // replaced or set aside: closed once handed back
}

// spawnerStats are the pool's counters: its spawners' (running and closed)
// and the time blocks waited for a free one.
func (h *helperSpawner) stats() (spawner.Stats, time.Duration, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.gone
	for _, ls := range h.all {
		st = st.Add(ls.sp.Stats())
	}
	return st, h.waited, len(h.all)
}

// pids are the running spawners' PIDs.
func (h *helperSpawner) pids() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	var pids []int
	for _, ls := range h.all {
		if pid := ls.sp.PID(); pid != 0 {
			pids = append(pids, pid)
		}
	}
	return pids
}

// startHelper clones a block helper with the given environment,
// descriptors and clone attributes: through one of the Sandbox's spawners when the
// clone makes a user namespace (Go forks, rather than vforks, only those),
// otherwise, or when no spawner can take it, from a locked server
// thread. overlays says the block's private root shows host directories as
// overlays (mRootFS and mOverlay): only such a block may come from a
// spawner that overlaid them in place, since the host directories are
// covered in its namespace. The directories the helper's namespace has
// overlaid already are returned for its spec (hook.Spec.Overlaid).
//
// inside says the helper was born in attr's cgroup (UseCgroupFD). The
// spawner cannot do that for a Go helper (clone3 refuses CLONE_PARENT with
// the exit signal Go's clone3 sets), so it clones one without the cgroup
// and the caller moves it in (cgroup.Add) while it waits for its spec and
// has run nothing of the block's, as on cgroup v1: a cgroup.procs write
// instead of forking the server.
func (p *platform) startHelper(env []string, files []*os.File, attr *syscall.SysProcAttr, overlays bool) (osp *os.Process, overlaid []string, inside bool, err error) {
	if attr.Cloneflags&syscall.CLONE_NEWUSER != 0 {
		outside := attr
		if attr.UseCgroupFD {
			c := *attr
			c.UseCgroupFD, c.CgroupFD = false, 0
			outside = &c
		}
		served, err := p.spawner.do(p.helperPath, overlays, func(sp *spawner.Spawner) (err error) {
			osp, err = sp.Spawn(env, files, outside)
			overlaid = sp.Overlaid()
			return err
		})
		if served && !errors.Is(err, spawner.ErrUnsupported) {
			return osp, overlaid, false, err
		}
	}
	osp, err = startOnStableThread(p.helperPath, helperArgv, &os.ProcAttr{Env: env, Files: files, Sys: attr})
	return osp, nil, attr.UseCgroupFD, err
}

// do calls call with a spawner of its own for the call's length. served
// false means no spawner took it (none runs, or the block's root does not
// fit their overlays, see startHelper): the caller clones the helper
// itself. A spawner that turns out to have died is dropped and the call
// made once more with another.
func (h *helperSpawner) do(self string, overlays bool, call func(*spawner.Spawner) error) (served bool, err error) {
	for range 2 {
		ls := h.acquire(self)
		if ls == nil {
			return false, nil
		}
		if !overlays && len(ls.sp.Overlaid()) > 0 {
			h.release(ls, false)
			return false, nil
		}
		err := call(ls.sp)
		if errors.Is(err, spawner.ErrClosed) {
			h.release(ls, true)
			continue
		}
		h.release(ls, false)
		return true, err
	}
	return false, nil
}

// overlayMaxAge is how long one spawner's overlays serve blocks. An
// overlay may keep showing a lower layer's entries as they were when it
// first looked them up (a host package upgraded meanwhile), so the
// spawner, and with it the overlays, is replaced after this long: blocks
// see host changes to the system directories, /etc and the shared dir
// within about a minute, as a block that runs that long would anyway.
const overlayMaxAge = time.Minute

// acquire lends the caller a free spawner, starting one when every running
// one is busy and the pool may grow, else waiting for one to come back
// (the wait is counted). One whose overlays are older than overlayMaxAge
// still serves, while its replacement starts in the background. nil: clone
// directly.
func (h *helperSpawner) acquire(self string) *liveSpawner {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.handed == nil {
		h.handed = sync.NewCond(&h.mu)
	}
	var since time.Time
	for {
		if h.closed || helperFile == nil {
			return nil
		}
		if n := len(h.free); n > 0 {
			ls := h.free[n-1]
			h.free = h.free[:n-1]
			if !since.IsZero() {
				h.waited += time.Since(since)
			}
			h.maybeReplace(self, ls)
			return ls
		}
		if len(h.all)+h.starting < h.limit() && h.failures < maxSpawnerFailures {
			h.starting++
			ls := h.start(self) // unlocks while the spawner starts
			h.starting--
			if ls != nil {
				return ls
			}
			continue
		}
		if len(h.all)+h.starting == 0 {
			return nil // none runs, none may start
		}
		if since.IsZero() {
			since = time.Now()
		}
		h.handed.Wait()
	}
}

func (h *helperSpawner) limit() int {
	if h.max > 0 {
		return h.max
	}
	return maxSpawners()
}

// start starts a spawner for the caller (h.mu held, released meanwhile).
// A failure counts against maxSpawnerFailures.
func (h *helperSpawner) start(self string) *liveSpawner {
	overlay := h.overlay
	h.mu.Unlock()
	sp, err := spawner.Start(startOnStableThread, self, helperFile, helperArgv, overlay)
	h.mu.Lock()
	if err != nil {
		h.failures++
		h.handed.Broadcast()
		return nil
	}
	if h.closed {
		h.mu.Unlock()
		_ = sp.Close()
		h.mu.Lock()
		return nil
	}
	if why := sp.Why(); why != "" && h.log != nil && !h.told {
		h.told = true
		h.log.Warn("sandbox: the spawner could not overlay every host directory in place; those blocks mount their own overlays (slower, as confined)", "reason", why)
	}
	ls := &liveSpawner{sp: sp, born: time.Now()}
	h.all = append(h.all, ls)
	return ls
}

// maybeReplace starts ls's replacement in the background once its overlays
// are overlayMaxAge old (h.mu held). A planned replacement, not a failure:
// it does not count against maxSpawnerFailures, and ls serves until the
// new one is up.
func (h *helperSpawner) maybeReplace(self string, ls *liveSpawner) {
	if len(ls.sp.Overlaid()) == 0 || ls.replacing || ls.retired || time.Since(ls.born) < overlayMaxAge {
		return
	}
	ls.replacing = true
	h.replaced.Add(1)
	go h.replace(self, ls, h.overlay)
}

// replace starts a spawner with fresh overlays and puts it in old's place:
// old is closed once it is handed back (at once when it is free). A failed
// start keeps old for another overlayRetry.
func (h *helperSpawner) replace(self string, old *liveSpawner, overlay []spawner.OverlayDir) {
	defer h.replaced.Done()
	sp, err := spawner.Start(startOnStableThread, self, helperFile, helperArgv, overlay)
	h.mu.Lock()
	old.replacing = false
	if err != nil || h.closed || old.retired {
		if err != nil {
			old.born = time.Now().Add(overlayRetry - overlayMaxAge)
		}
		h.mu.Unlock()
		if sp != nil {
			_ = sp.Close()
		}
		return
	}
	h.all = append(h.all, &liveSpawner{sp: sp, born: time.Now()})
	h.free = append(h.free, h.all[len(h.all)-1])
	closeNow := h.retireLocked(old)
	h.handed.Broadcast()
	h.mu.Unlock()
	if closeNow {
		h.closeOne(old)
	}
}

// overlayRetry is how soon a failed replacement (replace) is tried again.
const overlayRetry = 5 * time.Second

// retireLocked marks ls to be closed when it comes back, and reports
// whether it is free now (taken out of the free list: the caller closes it).
func (h *helperSpawner) retireLocked(ls *liveSpawner) bool {
	ls.retired = true
	for i, f := range h.free {
		if f == ls {
			h.free = append(h.free[:i], h.free[i+1:]...)
			return true
		}
	}
	return false
}

// release takes a lent spawner back; died: it was found dead (already
// closed and reaped by its client), which counts against
// maxSpawnerFailures.
func (h *helperSpawner) release(ls *liveSpawner, died bool) {
	h.mu.Lock()
	if died {
		h.failures++
		h.forgetLocked(ls)
	} else if !ls.retired && !h.closed {
		h.free = append(h.free, ls)
		h.handed.Signal()
		h.mu.Unlock()
		return
	}
	h.handed.Broadcast()
	h.mu.Unlock()
	if !died {
		h.closeOne(ls)
	}
}

// closeOne closes a spawner that is no longer lent or free and forgets it.
func (h *helperSpawner) closeOne(ls *liveSpawner) {
	_ = ls.sp.Close()
	h.mu.Lock()
	h.forgetLocked(ls)
	h.handed.Broadcast()
	h.mu.Unlock()
}

// forgetLocked drops ls from the pool, keeping its counters.
func (h *helperSpawner) forgetLocked(ls *liveSpawner) {
	for i, a := range h.all {
		if a == ls {
			h.all = append(h.all[:i], h.all[i+1:]...)
			h.gone = h.gone.Add(ls.sp.Stats())
			return
		}
	}
}

// setOverlay sets the directories later spawners overlay in place and
// sets aside the running spawners, made without them.
func (h *helperSpawner) setOverlay(dirs []spawner.OverlayDir, log *slog.Logger) {
	h.mu.Lock()
	h.overlay, h.log = dirs, log
	var now []*liveSpawner
	for _, ls := range h.all {
		if h.retireLocked(ls) {
			now = append(now, ls)
		}
	}
	h.mu.Unlock()
	for _, ls := range now {
		h.closeOne(ls)
	}
}

// spawnerOverlay lists the host directories a spawner should overlay in
// place: as root (the spawner needs its own mount namespace), when blocks
// get private roots with overlays, every system directory that is a
// directory (not a merged-/usr symlink), /etc and the shared dir, except
// those with host mounts below them (their blocks split them entry by
// entry, as before).
func (s *Sandbox) spawnerOverlay() []spawner.OverlayDir {
	p := &s.plat
	if p.euid != 0 || !p.runMechs().has(mRootFS|mOverlay) {
		return nil
	}
	var dirs []spawner.OverlayDir
	add := func(d string, hidden bool) {
		if st, err := os.Lstat(d); err != nil || !st.IsDir() || len(hostMounts.below([]string{d})) > 0 {
			return
		}
		dirs = append(dirs, spawner.OverlayDir{Path: d, Hidden: hidden})
	}
	for _, d := range mount.SystemDirs {
		add(d, false)
	}
	add("/etc", false)
	if s.cfg.Shared != "" {
		add(s.cfg.Shared, true)
	}
	return dirs
}

// close ends the spawners (one lent meanwhile once its round trip is over);
// helpers started afterwards are cloned directly.
func (h *helperSpawner) close() {
	h.mu.Lock()
	h.closed = true
	all := append([]*liveSpawner(nil), h.all...)
	h.free = nil
	if h.handed != nil {
		h.handed.Broadcast()
	}
	h.mu.Unlock()
	for _, ls := range all {
		h.closeOne(ls)
	}
	h.replaced.Wait() // a replacement under way closes what it started
}
