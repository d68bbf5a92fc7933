// Command bench is codellm's benchmark harness: it measures, in one run on one machine, what a fresh
// sandbox per block costs against bare processes, unshare(1) and bubblewrap, what the HTTP service
// sustains, how fast bytes move between blocks and what an interpreter block pays, and prints the rows
// with their ratios and targets (BENCHMARKS.md holds the latest run).
//
//	go run ./bench                 # full run, several minutes
//	go run ./bench --quick         # about two minutes
//	go run ./bench --json out.json --markdown out.md
//
// It installs nothing: a missing bubblewrap or interpreter skips its row and says how to get it. The
// binary imports internal/sandbox, whose init turns it into the sandbox's re-exec helper when it is
// started as one, so no separate helper binary is needed.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/codellm/codellm/internal/pipeline"
	"github.com/codellm/codellm/internal/sandbox"
)

// Results is the JSON document written by --json.
type Results struct {
	Started  time.Time       `json:"started"`
	Quick    bool            `json:"quick"`
	Machine  Machine         `json:"machine"`
	Spawn    *SpawnResult    `json:"spawn,omitempty"`
	Service  *ServiceResult  `json:"service,omitempty"`
	Scaling  *ScalingResult  `json:"scaling,omitempty"`
	Pipeline *PipelineResult `json:"pipeline,omitempty"`
	Python   *InterpResult   `json:"python,omitempty"`
	Node     *InterpResult   `json:"node,omitempty"`
	// Deterministic is the deterministic-mode row (bench/determinism.go).
	Deterministic []*DeterminismResult `json:"deterministic,omitempty"`
	// Trace is row 6, one block's path at c=1 (bench/trace.go).
	Trace   *TraceResult      `json:"trace,omitempty"`
	Skipped map[string]string `json:"skipped,omitempty"`
	Targets []Target          `json:"targets"`
	Seconds float64           `json:"seconds"`
}

// params sizes a run.
type params struct {
	spawnRuns     int
	serviceRounds int
	serviceDur    time.Duration
	scalingDur    time.Duration
	pipeBytes     int64
	pipeReps      int
	interpRuns    int
	traceDur      time.Duration
}

var allRows = []string{"spawn", "service", "scaling", "pipeline", "interp", "deterministic", "trace"}

// harnessFlags are the binaries and the sandbox mode of the servers the harness starts. Prebuilt binaries
// let it run where there is no Go toolchain (a bigger machine borrowed for one run): `go build` the
// harness, codellm (and its trace build) and go-judge here, copy them over and name them.
type harnessFlags struct {
	sandbox        string // serve's --sandbox
	codellm, trace string // prebuilt codellm, and its -tags codellm_trace build
	goJudge        string // prebuilt go-judge
}

var harness = harnessFlags{sandbox: "native"}

// prebuilt is the binary given for a codellm build with tags ("" or codellm_trace), or "" to build it.
func (h harnessFlags) prebuilt(tags string) string {
	if tags == "" {
		return h.codellm
	}
	return h.trace
}

// noopEnv makes the binary exit from its init: the spawn row's go-exec variant times a Go runtime start
// (with this binary's size and package inits, like the sandbox helper) with it. An environment variable,
// not a flag, so that the test binary of this package honours it too.
const noopEnv = "CODELLM_BENCH_NOOP"

func init() {
	if os.Getenv(noopEnv) == "1" {
		os.Exit(0)
	}
}

func main() {
	quick := flag.Bool("quick", false, "a run of about two minutes (fewer rounds, shorter load phases)")
	jsonOut := flag.String("json", "", "write the results as JSON to `FILE`")
	mdOut := flag.String("markdown", "", "write the results table as Markdown to `FILE`")
	only := flag.String("rows", strings.Join(allRows, ","), "comma-separated rows to run: "+strings.Join(allRows, ", "))
	ab := flag.String("ab", "", "instead of the rows, compare two codellm binaries `OLD,NEW` side by side (see ABResult)")
	var abp abParams
	flag.StringVar(&abp.program, "ab-program", "bash", "--ab: bash or python")
	flag.StringVar(&abp.endpoint, "ab-endpoint", "execute", "--ab: execute (/api/v2/execute) or chat (/v1/chat/completions)")
	flag.IntVar(&abp.conc, "ab-c", 1, "--ab: concurrency")
	flag.DurationVar(&abp.burst, "ab-burst", 500*time.Millisecond, "--ab: length of one burst")
	flag.DurationVar(&abp.total, "ab-d", 30*time.Second, "--ab: how long to alternate")
	flag.StringVar(&harness.sandbox, "sandbox", "native", "serve's --sandbox for the service, scaling, trace and --ab servers: native or besteffort")
	flag.StringVar(&harness.codellm, "codellm", "", "a prebuilt codellm `BINARY` to serve instead of building ./cmd/codellm")
	flag.StringVar(&harness.trace, "codellm-trace", "", "a prebuilt `BINARY` of codellm built with -tags codellm_trace, for the trace row")
	flag.StringVar(&harness.goJudge, "go-judge", "", "a prebuilt go-judge "+goJudgeVersion+" `BINARY` instead of building it")
	levels := flag.String("scaling-c", joinInts(scalingLevels), "the scaling row's concurrencies, comma-separated")
	scalingD := flag.Duration("scaling-d", 0, "the scaling row's time per row (default 10s, 4s with --quick)")
	flag.Parse()
	var err error
	if scalingLevels, err = parseInts(*levels); err != nil {
		fatalf("--scaling-c: %v", err)
	}
	if flag.NArg() > 0 {
		fatalf("unexpected arguments %q (see -h)", flag.Args())
	}
	if *ab != "" {
		bins := strings.Split(*ab, ",")
		if len(bins) != 2 || bins[0] == "" || bins[1] == "" {
			fatalf("--ab wants two binaries, OLD,NEW")
		}
		abp.bins = [2]string{bins[0], bins[1]}
		r, err := measureAB(abp, logf)
		if err != nil {
			fatalf("%v", err)
		}
		fmt.Print(abMarkdown(r))
		if *jsonOut != "" {
			b, _ := json.MarshalIndent(r, "", "  ")
			if err := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); err != nil {
				fatalf("%v", err)
			}
		}
		return
	}
	rows := strings.Split(*only, ",")
	for _, r := range rows {
		if !slices.Contains(allRows, r) {
			fatalf("--rows: unknown row %q (known: %s)", r, strings.Join(allRows, ", "))
		}
	}
	p := params{spawnRuns: 1000, serviceRounds: 3, serviceDur: 10 * time.Second, scalingDur: 10 * time.Second, pipeBytes: 1 << 30,
		pipeReps: 5, interpRuns: 150, traceDur: 15 * time.Second}
	if *quick {
		p = params{spawnRuns: 150, serviceRounds: 3, serviceDur: 4 * time.Second, scalingDur: 4 * time.Second, pipeBytes: 1 << 30,
			pipeReps: 3, interpRuns: 30, traceDur: 5 * time.Second}
	}
	if *scalingD > 0 {
		p.scalingDur = *scalingD
	}
	res, err := run(p, rows, *quick, logf)
	if err != nil {
		fatalf("%v", err)
	}
	md := markdown(res)
	fmt.Print(md)
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(*jsonOut, append(b, '\n'), 0o644); err != nil {
			fatalf("%v", err)
		}
	}
	if *mdOut != "" {
		if err := os.WriteFile(*mdOut, []byte(md), 0o644); err != nil {
			fatalf("%v", err)
		}
	}
}

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, a...)...)
}

func fatalf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", a...)
	os.Exit(1)
}

// measureInterps is row 4 for python3 and node; one that is not installed is skipped with the package
// that provides it.
func measureInterps(res *Results, pcfg pipeline.Config, runs int, logf func(string, ...any)) error {
	for _, in := range []struct {
		prog, flag, code, ext string
		dst                   **InterpResult
		pkg                   string
	}{
		{"python3", "-c", "pass", ".py", &res.Python, "python3"},
		{"node", "-e", "", ".js", &res.Node, "nodejs"},
	} {
		logf("interp: %s, %d interleaved runs", in.prog, runs)
		r, err := measureInterp(pcfg, in.prog, in.flag, in.code, in.ext, runs)
		if err != nil {
			if _, lerr := lookInterp(in.prog); lerr != nil {
				res.Skipped[in.prog] = fmt.Sprintf("not installed (apt-get install %s)", in.pkg)
				logf("interp: %s skipped: %v", in.prog, lerr)
				continue
			}
			return err
		}
		*in.dst = r
	}
	return nil
}

// run measures the selected rows in a fixed order (the cheap, noise-sensitive spawn row first).
func run(p params, rows []string, quick bool, logf func(string, ...any)) (*Results, error) {
	if runtime.GOOS != "linux" {
		return nil, fmt.Errorf("the harness measures Linux sandboxes; this is %s", runtime.GOOS)
	}
	t0 := time.Now()
	res := &Results{Started: t0.UTC(), Quick: quick, Machine: probeMachine(), Skipped: map[string]string{}}
	if res.Machine.Cgo {
		logf("note: this harness is a cgo build, so its sandbox helper pays the dynamic loader on every spawn; " +
			"run `CGO_ENABLED=0 go run ./bench` to measure spawns like the static release binary")
	}
	want := func(r string) bool { return slices.Contains(rows, r) }
	var pcfg pipeline.Config
	if want("spawn") || want("pipeline") || want("interp") || want("deterministic") {
		// The rows that run blocks in this process need its native sandbox; the others start servers.
		cfg, done, err := inProcess()
		if err != nil {
			return nil, err
		}
		defer done()
		pcfg = cfg
	}
	var err error
	if want("spawn") {
		logf("spawn: %d interleaved rounds of bare, unshare, bwrap, codellm", p.spawnRuns)
		if res.Spawn, err = measureSpawn(pcfg.Sandbox, p.spawnRuns, logf); err != nil {
			return nil, err
		}
	}
	if want("service") {
		logf("service: building and starting codellm serve and go-judge, %d rounds of %v per row", p.serviceRounds, p.serviceDur)
		if res.Service, err = measureService(p.serviceRounds, p.serviceDur, logf); err != nil {
			return nil, err
		}
	}
	if want("scaling") {
		logf("scaling: codellm (--sandbox %s) and go-judge at c=%s, %v per row", harness.sandbox, joinInts(scalingLevels), p.scalingDur)
		if res.Scaling, err = measureScaling(scalingLevels, p.scalingDur, logf); err != nil {
			return nil, err
		}
	}
	if err := inProcessRows(res, p, pcfg, want, logf); err != nil {
		return nil, err
	}
	if want("trace") {
		if res.Trace, err = measureTrace(p.traceDur, logf); err != nil {
			return nil, err
		}
	}
	res.Machine.LoadAfter = load1()
	res.Targets = targets(res)
	res.Seconds = round3(time.Since(t0).Seconds())
	return res, nil
}

// inProcess makes the native sandbox and work root of the rows that run blocks in the harness itself.
func inProcess() (pipeline.Config, func(), error) {
	sb, err := sandbox.New(sandbox.Config{Mode: sandbox.ModeNative})
	if err != nil {
		return pipeline.Config{}, nil, fmt.Errorf("native sandbox: %w", err)
	}
	if rep := sb.Report(); !rep.Ready {
		sb.Close()
		return pipeline.Config{}, nil, fmt.Errorf("native sandbox not available here (missing %v); run `go run ./cmd/codellm doctor`", rep.Missing)
	}
	work, err := os.MkdirTemp("", "codellm-bench-work-")
	if err != nil {
		sb.Close()
		return pipeline.Config{}, nil, err
	}
	// Closed, and settled, before the harness exits: the cgroups of runs still being removed in the
	// background would otherwise be left for the next codellm's sweep (or forever, where the next one runs
	// in another memory cgroup).
	return pipeline.Config{Sandbox: sb, WorkRoot: work}, func() { sb.Close(); os.RemoveAll(work) }, nil
}

// inProcessRows runs the pipeline, interpreter and deterministic rows (pcfg from inProcess).
func inProcessRows(res *Results, p params, pcfg pipeline.Config, want func(string) bool, logf func(string, ...any)) error {
	var err error
	if want("pipeline") {
		logf("pipeline: %d MiB through three cat blocks, %d reps", p.pipeBytes>>20, p.pipeReps)
		var off *pipeline.Config
		if osb, err := sandbox.New(sandbox.Config{Mode: sandbox.ModeOff, Logger: slog.New(slog.DiscardHandler)}); err == nil {
			defer osb.Close()
			off = &pipeline.Config{Sandbox: osb, WorkRoot: pcfg.WorkRoot}
		}
		if res.Pipeline, err = measurePipeline(pcfg, off, p.pipeBytes, p.pipeReps, logf); err != nil {
			return err
		}
	}
	if want("interp") {
		if err := measureInterps(res, pcfg, p.interpRuns, logf); err != nil {
			return err
		}
	}
	if want("deterministic") {
		logf("deterministic: python3 and node, %d interleaved runs off/on", p.interpRuns)
		if res.Deterministic, err = measureDeterminism(pcfg, p.interpRuns); err != nil {
			return err
		}
	}
	return nil
}

// joinInts and parseInts are --scaling-c's format.
func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a concurrency of 1 or more", f)
		}
		out = append(out, n)
	}
	return out, nil
}
