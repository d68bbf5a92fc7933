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
	mu      sync.Mutex
	sp      *spawner.Spawner
	born    time.Time // when sp started
	starts  int
	closed  bool
	overlay []spawner.OverlayDir // see Sandbox.spawnerOverlay
	log     *slog.Logger
	told    bool // the log has the spawner's reason for directories it did not overlay
	// replacing: a replacement with fresh overlays is being started
	// (replace); replaced counts those goroutines for close.
	replacing bool
	replaced  sync.WaitGroup
}

// startHelper clones a block helper with the given environment,
// descriptors and clone attributes: through the Sandbox's spawner when the
// clone makes a user namespace (Go forks, rather than vforks, only those),
// otherwise, or when the spawner cannot take it, from a locked server
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
		// A second try when the first spawner was closed meanwhile (replaced, or died).
		for range 2 {
			sp := p.spawner.get(p.helperPath)
			if sp == nil || !overlays && len(sp.Overlaid()) > 0 {
				break
			}
			osp, err := sp.Spawn(env, files, outside)
			if errors.Is(err, spawner.ErrClosed) {
				p.spawner.drop(sp)
				continue
			}
			if !errors.Is(err, spawner.ErrUnsupported) {
				return osp, sp.Overlaid(), false, err
			}
			break
		}
	}
	osp, err = startOnStableThread(p.helperPath, helperArgv, &os.ProcAttr{Env: env, Files: files, Sys: attr})
	return osp, nil, attr.UseCgroupFD, err
}

// overlayMaxAge is how long one spawner's overlays serve blocks. An
// overlay may keep showing a lower layer's entries as they were when it
// first looked them up (a host package upgraded meanwhile), so the
// spawner, and with it the overlays, is replaced after this long: blocks
// see host changes to the system directories, /etc and the shared dir
// within about a minute, as a block that runs that long would anyway.
const overlayMaxAge = time.Minute

// get returns the running spawner, starting one if there is none (and, for
// one whose overlays are older than overlayMaxAge, its replacement in the
// background); nil when helpers should be cloned directly.
func (h *helperSpawner) get(self string) *spawner.Spawner {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || helperFile == nil {
		return nil
	}
	if h.sp != nil && len(h.sp.Overlaid()) > 0 && time.Since(h.born) >= overlayMaxAge && !h.replacing {
		// A planned replacement, not a failure: it does not count against
		// maxSpawnerStarts, and the old spawner serves until the new one is up.
		h.replacing = true
		h.replaced.Add(1)
		go h.replace(self, h.overlay)
	}
	if h.sp == nil && h.starts < maxSpawnerStarts {
		h.starts++
		if sp, err := spawner.Start(startOnStableThread, self, helperFile, helperArgv, h.overlay); err == nil {
			h.sp, h.born = sp, time.Now()
			if why := sp.Why(); why != "" && h.log != nil && !h.told {
				h.told = true
				h.log.Warn("sandbox: the spawner could not overlay every host directory in place; those blocks mount their own overlays (slower, as confined)", "reason", why)
			}
		}
	}
	return h.sp
}

// replace starts a spawner with fresh overlays, swaps it in and closes the
// old one. Requests meanwhile go to the old spawner; one that reaches it
// after its Close gets ErrClosed and asks again (startHelper). A failed
// start keeps the old spawner for another overlayRetry.
func (h *helperSpawner) replace(self string, overlay []spawner.OverlayDir) {
	defer h.replaced.Done()
	sp, err := spawner.Start(startOnStableThread, self, helperFile, helperArgv, overlay)
	h.mu.Lock()
	h.replacing = false
	if err != nil || h.closed || h.sp == nil {
		if err != nil {
			h.born = time.Now().Add(overlayRetry - overlayMaxAge)
		}
		h.mu.Unlock()
		if sp != nil {
			_ = sp.Close()
		}
		return
	}
	old := h.sp
	h.sp, h.born = sp, time.Now()
	h.mu.Unlock()
	_ = old.Close()
}

// overlayRetry is how soon a failed replacement (replace) is tried again.
const overlayRetry = 5 * time.Second

// setOverlay sets the directories later spawners overlay in place and
// ends a running spawner made without them.
func (h *helperSpawner) setOverlay(dirs []spawner.OverlayDir, log *slog.Logger) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.overlay, h.log = dirs, log
	if h.sp != nil {
		_ = h.sp.Close()
		h.sp = nil
		h.starts--
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
	h.closed = true
	sp := h.sp
	h.sp = nil
	h.mu.Unlock()
	if sp != nil {
		_ = sp.Close()
	}
	h.replaced.Wait() // a replacement under way closes what it started
}
