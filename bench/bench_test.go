package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/pipeline"
	"github.com/codellm/codellm/internal/sandbox"
	"github.com/codellm/codellm/internal/sandbox/seccomp"
	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind (load workers, HTTP connections).
// The sandbox's spawner threads live for the whole process by design.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/codellm/codellm/internal/sandbox.spawnLoop"))
}

func TestQuantileNearestRank(t *testing.T) {
	var s sample
	for i := 1; i <= 100; i++ {
		s = append(s, time.Duration(101-i)*time.Millisecond) // unsorted on purpose
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0, time.Millisecond}, {0.5, 50 * time.Millisecond}, {0.99, 99 * time.Millisecond}, {1, 100 * time.Millisecond}} {
		if got := s.quantile(c.q); got != c.want {
			t.Errorf("quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	if s[0] != 100*time.Millisecond {
		t.Error("quantile sorted the caller's sample in place")
	}
	if (sample{}).p50() != 0 || ratio(1, 0) != 0 {
		t.Error("empty sample or zero baseline must read as 0")
	}
}

func TestTargetsMetAndMargin(t *testing.T) {
	ts := targets(&Results{
		Spawn: &SpawnResult{BwrapP50: 4, OverBwrap: 0.5, OverheadMs: 6},
		Service: &ServiceResult{RSSMiB: 30, RSSConc: 16, Ratios: []PeerRatio{
			{Endpoint: pathExecute, Lang: "bash", C1P50: 0.5, C4RPS: 0.5},
			{Endpoint: pathChat, Lang: "python", C1P50: 2, C4RPS: 2},
		}},
		Pipeline: &PipelineResult{Ratio: 0.7},
	})
	want := map[string]struct {
		met    bool
		margin float64
	}{
		"spawn.codellm_over_bwrap":               {true, 1.6},
		"spawn.codellm_overhead_ms":              {false, 0.5},
		"service.execute.bash.c1_p50_vs_gojudge": {true, 2},
		"service.execute.bash.c4_rps_vs_gojudge": {false, 0.5},
		"service.chat.python.c1_p50_vs_gojudge":  {false, 0.5},
		"service.chat.python.c4_rps_vs_gojudge":  {true, 2},
		"service.rss_mib":                        {true, 2},
		"pipeline.ratio":                         {true, 1},
	}
	if len(ts) != len(want) {
		t.Fatalf("%d targets, want %d: %+v", len(ts), len(want), ts)
	}
	for _, tg := range ts {
		w, ok := want[tg.Name]
		if !ok || tg.Met != w.met || tg.Margin != w.margin {
			t.Errorf("%s: met %v margin %v, want %+v", tg.Name, tg.Met, tg.Margin, w)
		}
	}
	// Without bubblewrap there is no ratio to judge, so no bwrap target.
	for _, tg := range targets(&Results{Spawn: &SpawnResult{OverheadMs: 1}}) {
		if tg.Name == "spawn.codellm_over_bwrap" {
			t.Error("bwrap target judged without a bwrap measurement")
		}
	}
}

// Every table row of the Markdown must have as many cells as its header: a shell pipe in a cell that is
// not escaped would split it.
func TestMarkdownTablesWellFormed(t *testing.T) {
	r := &Results{
		Spawn: &SpawnResult{Runs: 3, BareP50: 1, BwrapP50: 4, Variants: map[string]VariantStats{"bare": {P50: 1}, "bwrap": {P50: 4, CPU: 2}, "codellm": {P50: 3, CPU: 1}}},
		Service: &ServiceResult{Peer: "go-judge", Rows: []LoadResult{{System: "codellm", Endpoint: pathChat, Lang: "bash", Concurrency: 1, RPS: 10}},
			Ratios: []PeerRatio{{Endpoint: pathChat, Lang: "bash", C1P50: 1}}},
		Pipeline:      &PipelineResult{Bytes: 1 << 20, Reps: 1, CodellmMiB: 1, BashMiB: 1, Ratio: 1},
		Python:        &InterpResult{Runs: 1},
		Deterministic: []*DeterminismResult{{Program: "python3", Runs: 1, OffP50: 1, OnP50: 2}},
		Trace:         &TraceResult{Requests: 1, Steps: []TraceStep{{Label: "C.send", What: "client: request sent"}}},
		Scaling: &ScalingResult{Rows: []ScalingRow{
			{LoadResult: LoadResult{System: "go-judge", Endpoint: pathGoJudge, Lang: "bash", Concurrency: 1, RPS: 5}},
			{LoadResult: LoadResult{System: "codellm", Endpoint: pathExecute, Lang: "bash", Concurrency: 1, RPS: 4}, Parts: &ScalingParts{}},
			{LoadResult: LoadResult{System: "codellm", Endpoint: pathChat, Lang: "bash", Concurrency: 32, RPS: 4}, Parts: &ScalingParts{}},
		}},
	}
	r.Targets = targets(r)
	cells := 0
	for _, line := range strings.Split(markdown(r), "\n") {
		if !strings.HasPrefix(line, "|") {
			cells = 0
			continue
		}
		n := strings.Count(line, "|") - strings.Count(line, `\|`)
		if cells == 0 {
			cells = n
		} else if n != cells {
			t.Errorf("row has %d cell borders, header %d: %s", n, cells, line)
		}
	}
}

func TestBwrapArgsMirrorSystemDirs(t *testing.T) {
	args := strings.Join(bwrapArgs("/w", "/usr/bin/true"), " ")
	for _, want := range []string{"--unshare-all", "--die-with-parent", "--proc /proc", "--dev /dev", "--tmpfs /tmp", "--bind /w /w", "/usr /usr"} {
		if !strings.Contains(args, want) {
			t.Errorf("bwrap args lack %q: %s", want, args)
		}
	}
	if !strings.HasSuffix(args, " /usr/bin/true") {
		t.Errorf("program is not last: %s", args)
	}
}

// The load generator must refuse a wrong answer rather than count it: a fast wrong reply is not a result.
func TestLoadChecksEveryAnswer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if strings.Contains(string(b), "good") {
			io.WriteString(w, `{"ok":"yes"}`)
			return
		}
		io.WriteString(w, `{"ok":"no"}`)
	}))
	defer srv.Close()
	lr, err := load(srv.URL, "/x", `{"q":"good"}`, `"ok":"yes"`, 2, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if lr.Requests == 0 || lr.RPS <= 0 || lr.P50 <= 0 || lr.P99 < lr.P50 {
		t.Errorf("implausible result %+v", lr)
	}
	if _, err := load(srv.URL, "/x", `{"q":"bad"}`, `"ok":"yes"`, 2, 100*time.Millisecond); err == nil {
		t.Error("a wrong answer was counted as a result")
	}
}

// The peer ratios divide codellm's row by go-judge's row of the same program and concurrency, and a row
// without its counterpart yields no ratio.
func TestPeerRatios(t *testing.T) {
	rows := []LoadResult{
		{System: "go-judge", Endpoint: pathGoJudge, Lang: "bash", Concurrency: 1, P50: 4, ServerCPU: 2},
		{System: "go-judge", Endpoint: pathGoJudge, Lang: "bash", Concurrency: 4, RPS: 300, P50: 12, CPUBoundRPS: 400},
		{System: "codellm", Endpoint: pathExecute, Lang: "bash", Concurrency: 1, P50: 6, ServerCPU: 3},
		{System: "codellm", Endpoint: pathExecute, Lang: "bash", Concurrency: 4, RPS: 150, P50: 24, CPUBoundRPS: 100},
		{System: "codellm", Endpoint: pathExecute, Lang: "python", Concurrency: 1, P50: 6},
		{System: "codellm", Endpoint: pathExecute, Lang: "python", Concurrency: 4, RPS: 1},
	}
	got := peerRatios(rows)
	want := []PeerRatio{{Endpoint: pathExecute, Lang: "bash", C1P50: 1.5, C4RPS: 0.5, C1CPU: 1.5, C4P50: 2, CPUBoundC4: 0.25}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("peerRatios = %+v, want %+v", got, want)
	}
}

// The three request shapes carry the same program and parse as JSON; go-judge's copies it in as the file
// its command line names.
func TestProgramBodies(t *testing.T) {
	for _, p := range programs {
		var ex struct {
			Language string
			Files    []struct{ Content string }
		}
		if err := json.Unmarshal([]byte(p.executeBody()), &ex); err != nil || ex.Language != p.lang || len(ex.Files) != 1 || ex.Files[0].Content != p.code {
			t.Errorf("%s: execute body %+v (%v)", p.lang, ex, err)
		}
		var gj struct {
			Cmd []struct {
				Args   []string
				CopyIn map[string]struct{ Content string }
			}
		}
		_ = json.Unmarshal([]byte(p.goJudgeBody()), &gj)
		if len(gj.Cmd) != 1 || gj.Cmd[0].CopyIn[gj.Cmd[0].Args[1]].Content != p.code {
			t.Errorf("%s: go-judge body does not copy in the program it runs: %+v", p.lang, gj)
		}
		var chat struct{ Messages []struct{ Content string } }
		_ = json.Unmarshal([]byte(p.chatBody()), &chat)
		if want := "```" + p.label + "\n" + p.code + "\n```"; len(chat.Messages) != 1 || chat.Messages[0].Content != want {
			t.Errorf("%s: chat message %+v, want %q", p.lang, chat, want)
		}
	}
}

// treeCPU includes what a child process burns, which procCPU of the parent alone shows only once the
// child is reaped.
func TestTreeCPUCountsLiveChildren(t *testing.T) {
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	t0, err := treeCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		t1, err := treeCPU(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if t1-t0 >= 50*time.Millisecond {
			return
		}
	}
	t.Error("treeCPU never grew while a child was spinning")
}

func TestPeakRSSOfSelf(t *testing.T) {
	mib, err := peakRSS(os.Getpid())
	if err != nil || mib <= 0 {
		t.Fatalf("peakRSS(self) = %v, %v", mib, err)
	}
	if _, err := peakRSS(1 << 30); err == nil {
		t.Error("peakRSS of a missing process succeeded")
	}
}

func nativeSandbox(t *testing.T) *sandbox.Sandbox {
	t.Helper()
	sb, err := sandbox.New(sandbox.Config{Mode: sandbox.ModeNative})
	if err == nil && !sb.Report().Ready {
		err = os.ErrNotExist
	}
	if err != nil {
		if os.Getenv("CODELLM_REQUIRE_SANDBOX") == "1" {
			t.Fatalf("native sandbox unavailable: %v", err)
		}
		t.Skipf("native sandbox unavailable: %v", err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	return sb
}

// A few real rounds of the spawn row: every variant present and plausible (a sandboxed spawn cannot be
// cheaper than forking at all).
func TestSpawnSmoke(t *testing.T) {
	res, err := measureSpawn(nativeSandbox(t), 3, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"bare", "codellm", "codellm-block"} {
		v, ok := res.Variants[k]
		if !ok || v.P50 <= 0 || v.P99 < v.P50 || v.Min > v.P50 || v.CPU <= 0 {
			t.Errorf("%s: %+v (present %v)", k, v, ok)
		}
	}
	if res.CodellmP50 <= 0 || res.OverheadMs != round3(res.CodellmP50-res.BareP50) {
		t.Errorf("%+v", res)
	}
}

// The pipeline row really moves the bytes through five sandboxed blocks (it checks wc -c's count).
func TestPipelineSmoke(t *testing.T) {
	cfg := pipeline.Config{Sandbox: nativeSandbox(t), WorkRoot: t.TempDir()}
	if err := os.Chmod(cfg.WorkRoot, 0o755); err != nil {
		t.Fatal(err)
	}
	osb, err := sandbox.New(sandbox.Config{Mode: sandbox.ModeOff})
	if err != nil {
		t.Fatal(err)
	}
	defer osb.Close()
	res, err := measurePipeline(cfg, &pipeline.Config{Sandbox: osb, WorkRoot: cfg.WorkRoot}, 4<<20, 1, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if res.Bytes != 4<<20 || res.CodellmMiB <= 0 || res.BashMiB <= 0 || res.OffMiB <= 0 || res.Ratio <= 0 || res.OffRatio <= 0 {
		t.Errorf("%+v", res)
	}
}

// procCPU is the CPU time of pid and its reaped children.
func procCPU(pid int) (time.Duration, error) {
	_, c, err := procStat(pid)
	return c, err
}

func TestProcCPUGrowsWithWork(t *testing.T) {
	c0, err := procCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		c1, err := procCPU(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if c1 > c0 {
			return
		}
		for i := 0; i < 1e6; i++ { // burn a little CPU
			_ = strings.Repeat("x", i%7)
		}
	}
	t.Error("procCPU never grew while this process was busy")
}

// BenchmarkSeccompProgram is the cost of assembling the sandbox's seccomp filter, which the helper does
// once per block before exec (a candidate for building once in the server and handing the raw program
// over with the spec).
func BenchmarkSeccompProgram(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := seccomp.Program(); err != nil {
			b.Fatal(err)
		}
	}
}

// A go-judge that cannot start is reported, not waited for: the service row then records one skip line.
func TestGoJudgeStartFailureIsReported(t *testing.T) {
	f, err := exec.LookPath("false")
	if err != nil {
		t.Skip("no false(1)")
	}
	if s, err := startGoJudge(f, t.TempDir()); err == nil {
		s.stop()
		t.Fatal("a go-judge that exits at once was reported as started")
	} else if !strings.Contains(err.Error(), "exited during startup") {
		t.Errorf("unexpected error: %v", err)
	}
}

// The machine's busy time grows by at least what this process burns (less a tick of rounding on each
// reading): it counts every process, so it can only be larger.
func TestMachineBusyCountsThisProcess(t *testing.T) {
	self := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	b0, err := machineBusy()
	if err != nil || b0 <= 0 {
		t.Fatalf("machineBusy = %v, %v", b0, err)
	}
	s0 := self()
	for x := 0; self()-s0 < 200*time.Millisecond; x++ {
	}
	burnt := self() - s0
	b1, err := machineBusy()
	if err != nil {
		t.Fatal(err)
	}
	if b1-b0 < burnt-20*time.Millisecond {
		t.Fatalf("machine busy grew %v while this process alone used %v", b1-b0, burnt)
	}
}

// The trace row gives each request the server stamps between its send and its reply (requests are
// sequential), ignores stamps outside every window and malformed lines, and takes per-step medians.
func TestSummarizeTraceAttributesStamps(t *testing.T) {
	helper := parseStamps("noise from the program\nT h.spec 1300\nT h.spec\nT h.forked x\n", "T ")
	if len(helper) != 1 || helper[0] != (stamp{"h.spec", 1300}) {
		t.Fatalf("parseStamps = %v", helper)
	}
	ms := int64(time.Millisecond)
	reqs := [][]stamp{
		{{"C.send", 0}, {"h.spec", 2 * ms}, {"C.recv", 10 * ms}},
		{{"C.send", 20 * ms}, {"h.spec", 24 * ms}, {"C.recv", 30 * ms}},
		{{"C.send", 40 * ms}, {"h.spec", 43 * ms}, {"C.recv", 50 * ms}},
	}
	server := []stamp{{"r.begin", 41 * ms}, {"r.begin", 1 * ms}, {"r.begin", 15 * ms}, {"s.started", 5 * ms},
		{"r.begin", 22 * ms}, {"s.started", 27 * ms}, {"s.started", 46 * ms}}
	res := summarizeTrace(reqs, server)
	got := map[string]TraceStep{}
	for _, s := range res.Steps {
		got[s.Label] = s
	}
	for _, w := range []struct {
		label   string
		at, gap float64
		seen    int
	}{{"r.begin", 1, 1, 3}, {"h.spec", 3, 2, 3}, {"s.started", 6, 3, 3}, {"C.recv", 10, 4, 3}} {
		s := got[w.label]
		if s.AtP50 != w.at || s.GapP50 != w.gap || s.Seen != w.seen {
			t.Errorf("%s: at %v gap %v seen %d, want %v %v %d", w.label, s.AtP50, s.GapP50, s.Seen, w.at, w.gap, w.seen)
		}
	}
	if res.Requests != 3 || res.Steps[0].Label != "C.send" {
		t.Errorf("requests %d, first step %q", res.Requests, res.Steps[0].Label)
	}
}

// --ab refuses a program or endpoint it does not know before it starts any server.
func TestABRejectsUnknownProgramAndEndpoint(t *testing.T) {
	for _, p := range []abParams{
		{bins: [2]string{"/nonexistent/a", "/nonexistent/b"}, program: "cobol", endpoint: "execute", conc: 1},
		{bins: [2]string{"/nonexistent/a", "/nonexistent/b"}, program: "bash", endpoint: "grpc", conc: 1},
	} {
		_, err := measureAB(p, t.Logf)
		if err == nil || !strings.Contains(err.Error(), "--ab-") {
			t.Fatalf("%+v: got %v, want a --ab-program/--ab-endpoint error", p, err)
		}
	}
}

// A server stamp of the request before (its run closed behind its reply) that falls early in this
// request's window is not this request's step: each label counts from the path's previous step on.
func TestSummarizeTraceSkipsTheRequestBefore(t *testing.T) {
	req := []stamp{{"C.send", 0}, {"C.recv", 10e6}}
	server := []stamp{{"s.close.done", 1e6}, {"s.spawn", 2e6}, {"s.progstatus", 6e6}, {"s.reaped", 7e6}, {"s.close.done", 12e6}}
	res := summarizeTrace([][]stamp{req}, server)
	got := map[string]float64{}
	for _, st := range res.Steps {
		got[st.Label] = st.AtP50
	}
	if got["s.spawn"] != 2 || got["s.reaped"] != 7 || got["C.recv"] != 10 {
		t.Fatalf("steps %+v", res.Steps)
	}
	if _, ok := got["s.close.done"]; ok {
		t.Fatalf("the request before's run close (1 ms) or the next one's (12 ms) was counted: %+v", res.Steps)
	}
}

// The scaling row reads the serial resources from /metrics by name, and bounds the rate by the busiest:
// the spawners (their count over the longer of held and busy) or the cgroups (make and remove together).
func TestParseSerialAndBound(t *testing.T) {
	m, err := parseSerial(strings.NewReader(`# HELP codellm_sandbox_serial_seconds_total x
# TYPE codellm_sandbox_serial_seconds_total counter
codellm_sandbox_serial_seconds_total{resource="spawner_held"} 1.5
codellm_sandbox_serial_seconds_total{resource="spawner_busy"} 2
codellm_sandbox_serial_seconds_total{resource="cgroup_make"} 0.25
codellm_sandbox_serial_operations_total{resource="spawner"} 7
codellm_sandbox_spawners 3
go_sync_mutex_wait_total_seconds_total 0.125
`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"spawner_held": 1.5, "spawner_busy": 2, "cgroup_make": 0.25, "spawners": 3, "lock_wait": 0.125}
	if !reflect.DeepEqual(m, want) {
		t.Errorf("parsed %v, want %v", m, want)
	}
	if _, err := parseSerial(strings.NewReader("go_goroutines 3\n")); err == nil {
		t.Error("a /metrics without the serial counters was accepted")
	}
	for _, c := range []struct {
		p    ScalingParts
		want float64
	}{
		{ScalingParts{Spawners: 2, SpawnerHeld: 1, SpawnerBusy: 0.5, CgroupMake: 0.1, CgroupRemove: 0.1}, 2000},
		{ScalingParts{Spawners: 4, SpawnerHeld: 1, SpawnerBusy: 2, CgroupMake: 0.5, CgroupRemove: 0.5}, 1000},
		{ScalingParts{}, 0},
	} {
		if got := serialBound(&c.p); got != c.want {
			t.Errorf("serialBound(%+v) = %v, want %v", c.p, got, c.want)
		}
	}
	if kthreadKind("kworker/u8:2-events_unbound") != "kworker" || kthreadKind("rcu_exp_gp_kthread_worker") != "rcu" ||
		kthreadKind("ksoftirqd/0") != "softirq" || kthreadKind("kthreadd") != "other" {
		t.Error("kernel threads sorted into the wrong kinds")
	}
}

// Kernel threads are found by their task flag, and this process is none of them.
func TestKernelCPUReadsKernelThreads(t *testing.T) {
	k, err := kernelCPU()
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"kworker", "rcu", "softirq", "other", "irq"} {
		if _, ok := k[kind]; !ok {
			t.Errorf("no %s entry in %v", kind, k)
		}
	}
	if st, err := readStat(os.Getpid()); err != nil || st.kthread {
		t.Errorf("this process read as a kernel thread (%+v, %v)", st, err)
	}
	if st, err := readStat(2); err == nil && !st.kthread {
		t.Errorf("kthreadd (PID 2) not read as a kernel thread: %+v", st)
	}
}

// The server's spawners are found among the children of every one of its threads (they are started from
// locked threads, not the main one): here, this process's own child named codellm-spawner.
func TestServerAndSpawnersFindsChildrenOfAnyThread(t *testing.T) {
	sleep, err := os.ReadFile("/bin/sleep")
	if err != nil {
		t.Skip(err)
	}
	bin := filepath.Join(t.TempDir(), "codellm-spawner") // its comm
	if err := os.WriteFile(bin, sleep, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "5")
	done := make(chan struct{})
	go func() { // from some thread of this process, likely not the main one
		defer close(done)
		if err := cmd.Start(); err != nil {
			t.Error(err)
		}
	}()
	<-done
	if cmd.Process == nil {
		return
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	for range 100 {
		if _, sp, err := serverAndSpawners(os.Getpid()); err == nil && len(sp) == 1 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Error("the child named codellm-spawner was not found")
}
