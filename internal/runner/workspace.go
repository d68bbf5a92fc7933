package runner

import (
	"errors"
	"os"
	"time"

	"github.com/codellm/codellm/internal/sandbox"
)

// workspace is one execute's view of its host workspace directory: bind-mounted (Persist, files out from
// a scan before and after) or, in the bounded private mode (see private.go), copied into the sandbox and
// collected from it.
type workspace struct {
	r       *Runner
	s       *session // nil for one-off runs
	dir     string
	private bool

	root    *os.Root // bind-mounted mode: the host workspace, for the scans
	before  snapshot
	scanned bool
}

// openWorkspace picks the mode for run (private when the runner is bounded that way and the run's blocks
// can be collected) and, bind-mounted, takes the "before" scan of files out.
func (r *Runner) openWorkspace(s *session, dir string, run *sandbox.Run) (*workspace, *Error) {
	ws := &workspace{r: r, s: s, dir: dir, private: r.private && run.CanCollect()}
	if r.private && !ws.private {
		r.unbounded.Do(func() {
			r.log.Warn("runner: this sandbox has no private root, so runner workspaces are host directories bounded per file only (WorkspaceSize needs the sandbox's user, mount and PID namespaces)")
		})
	}
	if ws.private {
		return ws, nil
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, ws.fail("opening the workspace failed", err)
	}
	before, err := scan(root)
	if err != nil && !errors.Is(err, errTooManyEntries) {
		root.Close()
		return nil, ws.fail("scanning the workspace failed", err)
	}
	ws.root, ws.before, ws.scanned = root, before, err == nil
	return ws, nil
}

func (ws *workspace) close() {
	if ws.root != nil {
		ws.root.Close()
	}
}

// fail is a sandbox failure that may have left the session's workspace half-written: it is marked dirty.
func (ws *workspace) fail(what string, err error) *Error { return ws.r.failIn(ws.s, what, err) }

func (r *Runner) failIn(s *session, what string, err error) *Error {
	if s != nil {
		r.markDirty(s, what+" ("+err.Error()+")")
	}
	return sandboxFailed(what+": "+err.Error(), err)
}

// runLimits are a stage's sandbox limits.
func (r *Runner) runLimits(memory int64, cpu time.Duration) *sandbox.Limits {
	return &sandbox.Limits{Memory: memory, CPUTime: cpu}
}

// spec completes a stage's Spec with the workspace; list says the stage's files out are wanted (the run
// stage). In the private mode it comes with its collector: a session's tree, and a compile stage's build
// products, are kept; a one-off run stage's are only listed.
func (ws *workspace) spec(sp sandbox.Spec, list bool) (sandbox.Spec, *collector) {
	sp.Dir, sp.MountAt = ws.dir, WorkDir
	if !ws.private {
		sp.Persist = true
		return sp, nil
	}
	cfg := &ws.r.cfg
	c := &collector{host: ws.dir, keep: ws.s != nil || !list, list: list, maxCount: cfg.FilesOutMaxCount,
		maxBytes: cfg.FilesOutMaxBytes, bound: cfg.WorkspaceSize, entries: maxKeptEntries}
	sp.WorkdirSize = cfg.WorkspaceSize
	sp.Collect = func(root string) error {
		c.err = c.collect(root)
		return c.err
	}
	return sp, c
}

// collected checks a private stage's collect (nil c: bind-mounted, nothing to check). A stage whose
// sandbox was killed outright was not collected: a session is then marked dirty (the host copy lacks what
// the run did), files out are unknown. A collect that failed kept nothing: the host copy is as before the
// stage, and the execute fails.
func (ws *workspace) collected(c *collector) *Error {
	switch {
	case c == nil:
		return nil
	case !c.ran:
		if ws.s != nil {
			ws.r.markDirty(ws.s, "the previous execute's workspace could not be collected from its sandbox")
		}
		c.truncated = true
		return nil
	case c.err != nil:
		return sandboxFailed("the run's workspace could not be collected, so none of its changes were kept: "+c.err.Error(), c.err)
	}
	if c.keep && ws.s != nil {
		// The collected tree replaced the directory: its new identity is the session's (tamper check).
		key, err := dirID(ws.dir)
		if err != nil {
			return ws.fail("the collected workspace is unreadable", err)
		}
		ws.s.key = key
	}
	return nil
}

// filesOut fills the response's files: from the collector (private), or from a second scan of the
// bind-mounted workspace compared with the first.
func (ws *workspace) filesOut(resp *ExecuteResponse, c *collector) *Error {
	if c != nil {
		resp.Files, resp.FilesTruncated = c.files, c.truncated
		return nil
	}
	after, err := scan(ws.root)
	if err != nil && !errors.Is(err, errTooManyEntries) {
		return ws.fail("scanning the workspace after the run failed", err)
	}
	if err != nil || !ws.scanned {
		resp.FilesTruncated = true
		return nil
	}
	files, omitted, err := filesOut(ws.root, ws.before, after, ws.r.cfg.FilesOutMaxCount, ws.r.cfg.FilesOutMaxBytes)
	if err != nil {
		return ws.fail("reading the run's files failed", err)
	}
	resp.Files, resp.FilesTruncated = files, omitted > 0
	return nil
}

// maxKeptEntries bounds a tree copied back (a session's, a compile stage's): every later execute copies
// the whole session in and out, so a run that leaves more entries has its changes refused (the tmpfs
// itself allows one inode per 4 KiB, 65 536 in 256 MiB, at about 0.3 ms per entry per execute).
const maxKeptEntries = maxScanEntries
