package main

import (
	"fmt"
	"os"
	"os/exec"
	"time"

	"golang.org/x/sys/unix"

	"github.com/codellm/codellm/internal/sandbox"
	"github.com/codellm/codellm/internal/sandbox/mount"
)

// SpawnResult is row 1: `true` started and reaped by each mechanism, interleaved.
type SpawnResult struct {
	Runs           int      `json:"runs"`
	BareP50        float64  `json:"bare_p50_ms"`
	BareP99        float64  `json:"bare_p99_ms"`
	UnshareP50     float64  `json:"unshare_p50_ms,omitempty"`
	UnshareP99     float64  `json:"unshare_p99_ms,omitempty"`
	BwrapP50       float64  `json:"bwrap_p50_ms,omitempty"`
	BwrapP99       float64  `json:"bwrap_p99_ms,omitempty"`
	CodellmP50     float64  `json:"codellm_p50_ms"`
	CodellmP99     float64  `json:"codellm_p99_ms"`
	CodellmMin     float64  `json:"codellm_min_ms"`
	BlockP50       float64  `json:"codellm_block_p50_ms"`
	BlockP99       float64  `json:"codellm_block_p99_ms"`
	OverBwrap      float64  `json:"codellm_over_bwrap,omitempty"`
	OverheadMs     float64  `json:"codellm_overhead_ms"`
	BlockOverBwrap float64  `json:"codellm_block_over_bwrap,omitempty"`
	Skipped        []string `json:"skipped,omitempty"`
	// Variants holds every variant's numbers, CPU included, keyed by bare, unshare, bwrap, codellm,
	// codellm-block.
	Variants map[string]VariantStats `json:"variants"`
}

// VariantStats is one spawn variant. CPU is the mean CPU milliseconds per spawn (see cpuNow).
type VariantStats struct {
	P50 float64 `json:"p50_ms"`
	P99 float64 `json:"p99_ms"`
	Min float64 `json:"min_ms"`
	CPU float64 `json:"cpu_ms"`
}

// variant is one way of running `true` once; it returns the wall time from start to reaped.
type variant struct {
	name string
	run  func() (time.Duration, error)
	s    sample
	cpu  time.Duration // summed CPU of the harness and its reaped children over the measured runs
}

// cpuNow is the CPU time used so far by this process and every child it has reaped. Its growth across
// one spawn is that spawn's CPU cost (parent-side setup plus the helper, bwrap or unshare and `true`),
// which, unlike wall time, barely moves with the load other processes put on the machine.
func cpuNow() time.Duration {
	var self, kids unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &self)
	_ = unix.Getrusage(unix.RUSAGE_CHILDREN, &kids)
	return tv(self.Utime) + tv(self.Stime) + tv(kids.Utime) + tv(kids.Stime)
}

func tv(t unix.Timeval) time.Duration { return time.Duration(t.Nano()) }

// measureSpawn runs every available variant round-robin, so a burst of load from other processes on the
// shared machine hits all variants alike; the ratios are therefore more trustworthy than any absolute.
func measureSpawn(sb *sandbox.Sandbox, runs int, logf func(string, ...any)) (*SpawnResult, error) {
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer null.Close()
	truePath, err := exec.LookPath("true")
	if err != nil {
		return nil, fmt.Errorf("spawn: %w", err)
	}
	dir, err := os.MkdirTemp("", "codellm-bench-spawn-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	// The sandbox user (an unprivileged mapped uid) must be able to enter the workdir, as in a real run.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	res := &SpawnResult{Runs: runs}
	vs := hostVariants(res, null, dir, truePath)
	spec := sandbox.Spec{Path: truePath, Args: []string{"true"}, Dir: dir, Stdout: null, Stderr: null}
	cvs, cleanup, err := codellmVariants(sb, spec)
	defer cleanup()
	if err != nil {
		return nil, err
	}
	if err := measureRounds(append(vs, cvs...), runs, logf); err != nil {
		return nil, err
	}
	summarizeSpawn(res, append(vs, cvs...))
	return res, nil
}

// hostVariants are the references: bare `true`, a Go runtime start, unshare(1) and bubblewrap (each
// skipped with a line in res when missing or failing here).
func hostVariants(res *SpawnResult, null *os.File, dir, truePath string) []*variant {
	procEnv := func(env []string, path string, argv ...string) func() (time.Duration, error) {
		return func() (time.Duration, error) {
			t0 := time.Now()
			p, err := os.StartProcess(path, argv, &os.ProcAttr{Dir: dir, Env: env, Files: []*os.File{null, null, null}})
			if err != nil {
				return 0, err
			}
			st, err := p.Wait()
			d := time.Since(t0)
			if err != nil {
				return 0, err
			}
			if !st.Success() {
				return 0, fmt.Errorf("%s: %v", argv[0], st)
			}
			return d, nil
		}
	}
	proc := func(path string, argv ...string) func() (time.Duration, error) {
		return procEnv([]string{}, path, argv...)
	}
	vs := []*variant{{name: "bare", run: proc(truePath, "true")}}
	// go-exec: this Go binary started and exiting from its init (see noopEnv) — the floor any re-exec'd
	// Go helper pays before it does any sandbox work; the gap to bare is the Go runtime start.
	if self, err := os.Executable(); err == nil {
		vs = append(vs, &variant{name: "go-exec", run: procEnv([]string{noopEnv + "=1"}, self, "bench")})
	}
	tryTool := func(name, missing string, argv func(path string) []string) {
		path, err := exec.LookPath(name)
		if err != nil {
			res.Skipped = append(res.Skipped, name+": "+missing)
			return
		}
		a := argv(path)
		v := &variant{name: name, run: proc(path, a...)}
		if _, err := v.run(); err != nil {
			res.Skipped = append(res.Skipped, name+": "+err.Error())
			return
		}
		vs = append(vs, v)
	}
	tryTool("unshare", "not installed (apt-get install util-linux)", func(string) []string {
		return []string{"unshare", "-Urmpfn", "--mount-proc", truePath}
	})
	tryTool("bwrap", "not installed; install it with `apt-get install bubblewrap` to get the bubblewrap row", func(string) []string {
		return bwrapArgs(dir, truePath)
	})
	return vs
}

// codellmVariants are codellm's: a whole one-block run (its group from the pool made ahead, as serve
// runs), one more block in a run, and one more block with the program as PID 1. cleanup closes what they
// hold.
func codellmVariants(sb *sandbox.Sandbox, spec sandbox.Spec) (vs []*variant, cleanup func(), err error) {
	var closers []func()
	cleanup = func() {
		for _, c := range closers {
			c()
		}
	}
	// codellm: what one single-block request pays — a fresh run (its cgroup), the block, and the cleanup.
	vs = append(vs, &variant{name: "codellm", run: fullRun(sb, spec)})
	// codellm-block: one more block of an already created run (the per-block cost of a multi-block
	// pipeline). The run is renewed every 200 blocks so its bookkeeping stays small.
	blk, closeBlk := moreBlocks(sb, spec, 200)
	closers = append(closers, closeBlk)
	vs = append(vs, &variant{name: "codellm-block", run: blk})
	// codellm-block-pid1: the same with the program exec'd as its namespace's PID 1 (no init kept), the
	// behaviour before the init, so the init's cost is measured in the same interleaved run.
	pcfg := sb.Config()
	pcfg.ProgramAsPID1 = true
	if psb, err := sandbox.New(pcfg); err == nil {
		pblk, closeP := moreBlocks(psb, spec, 1<<30)
		closers = append(closers, closeP, func() { _ = psb.Close() })
		vs = append(vs, &variant{name: "codellm-block-pid1", run: pblk})
	}
	return vs, cleanup, nil
}

// fullRun is one single-block request's sandbox work: NewRun, Start, Wait, Close.
func fullRun(sb *sandbox.Sandbox, spec sandbox.Spec) func() (time.Duration, error) {
	return func() (time.Duration, error) {
		t0 := time.Now()
		r, err := sb.NewRun(nil)
		if err != nil {
			return 0, err
		}
		r.OneBlock() // as serve's single-block runs
		p, err := r.Start(spec)
		if err != nil {
			r.Close()
			return 0, err
		}
		w := p.Wait()
		cerr := r.Close()
		d := time.Since(t0)
		if w.ExitCode != 0 || w.Err != nil {
			return 0, fmt.Errorf("codellm: %+v", w)
		}
		return d, cerr
	}
}

// moreBlocks times one more block of a shared run, renewed every renew blocks.
func moreBlocks(sb *sandbox.Sandbox, spec sandbox.Spec, renew int) (run func() (time.Duration, error), closeRun func()) {
	var shared *sandbox.Run
	blocks := 0
	run = func() (time.Duration, error) {
		if shared == nil || blocks == renew {
			if shared != nil {
				shared.Close()
			}
			var err error
			if shared, err = sb.NewRun(nil); err != nil {
				return 0, err
			}
			blocks = 0
		}
		blocks++
		t0 := time.Now()
		p, err := shared.Start(spec)
		if err != nil {
			return 0, err
		}
		w := p.Wait()
		d := time.Since(t0)
		if w.ExitCode != 0 || w.Err != nil {
			return 0, fmt.Errorf("block: %+v", w)
		}
		return d, nil
	}
	return run, func() {
		if shared != nil {
			shared.Close()
		}
	}
}

// measureRounds warms every variant up, then runs them round-robin runs times, recording wall and CPU.
func measureRounds(vs []*variant, runs int, logf func(string, ...any)) error {
	// Warm up page cache and the helper binary's pages before measuring.
	for _, v := range vs {
		for range 5 {
			if _, err := v.run(); err != nil {
				return fmt.Errorf("spawn %s: %w", v.name, err)
			}
		}
	}
	for i := range runs {
		for _, v := range vs {
			c0 := cpuNow()
			d, err := v.run()
			if err != nil {
				return fmt.Errorf("spawn %s: %w", v.name, err)
			}
			v.cpu += cpuNow() - c0
			v.s = append(v.s, d)
		}
		if (i+1)%(max(runs/4, 1)) == 0 {
			logf("spawn: %d/%d rounds", i+1, runs)
		}
	}
	return nil
}

// summarizeSpawn fills res from the variants' samples.
func summarizeSpawn(res *SpawnResult, vs []*variant) {
	by := map[string]sample{}
	res.Variants = map[string]VariantStats{}
	for _, v := range vs {
		by[v.name] = v.s
		res.Variants[v.name] = VariantStats{P50: ms(v.s.p50()), P99: ms(v.s.p99()), Min: ms(v.s.min()),
			CPU: round3(float64(v.cpu) / float64(time.Millisecond) / float64(len(v.s)))}
	}
	res.BareP50, res.BareP99 = ms(by["bare"].p50()), ms(by["bare"].p99())
	if s, ok := by["unshare"]; ok {
		res.UnshareP50, res.UnshareP99 = ms(s.p50()), ms(s.p99())
	}
	if s, ok := by["bwrap"]; ok {
		res.BwrapP50, res.BwrapP99 = ms(s.p50()), ms(s.p99())
	}
	res.CodellmP50, res.CodellmP99, res.CodellmMin = ms(by["codellm"].p50()), ms(by["codellm"].p99()), ms(by["codellm"].min())
	res.BlockP50, res.BlockP99 = ms(by["codellm-block"].p50()), ms(by["codellm-block"].p99())
	res.OverBwrap = ratio(res.CodellmP50, res.BwrapP50)
	res.BlockOverBwrap = ratio(res.BlockP50, res.BwrapP50)
	res.OverheadMs = round3(res.CodellmP50 - res.BareP50)
}

// bwrapArgs is bubblewrap doing what codellm's native sandbox does: every namespace, the same read-only
// system directories and /etc entries (taken from codellm's own mount lists, symlinks recreated as
// symlinks), a fresh /proc and /dev, a private /tmp, the workdir, a non-root uid and a hostname.
func bwrapArgs(dir, prog string) []string {
	args := []string{"bwrap", "--unshare-all", "--die-with-parent", "--new-session"}
	for _, d := range mount.SystemDirs {
		args = appendMirror(args, d)
	}
	for _, e := range mount.EtcEntries {
		args = appendMirror(args, "/etc/"+e)
	}
	return append(args, "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
		"--bind", dir, dir, "--chdir", dir, "--uid", "1000", "--gid", "1000", "--hostname", "codellm", prog)
}

func appendMirror(args []string, p string) []string {
	fi, err := os.Lstat(p)
	switch {
	case err != nil:
		return args
	case fi.Mode()&os.ModeSymlink != 0:
		t, err := os.Readlink(p)
		if err != nil {
			return args
		}
		return append(args, "--symlink", t, p)
	default:
		return append(args, "--ro-bind", p, p)
	}
}
