package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// ScalingResult is the scaling row: codellm's `/api/v2/execute` and go-judge's `/run` on the bash program
// at rising concurrency (one row of each per level, interleaved), plus chat bash at the level the targets
// name and python at c=16, with what bounds codellm's rate: the CPU of each of its parts and the busy time
// of each resource blocks pass through one at a time, per request.
type ScalingResult struct {
	Mode       string       `json:"sandbox_mode"` // serve's --sandbox
	RowSeconds float64      `json:"row_seconds"`
	Levels     []int        `json:"concurrency"`
	Peer       string       `json:"peer,omitempty"`
	PeerSkip   string       `json:"peer_skipped,omitempty"`
	Rows       []ScalingRow `json:"rows"`
}

// ScalingRow is one row: the service numbers of LoadResult, how busy the whole machine was, and for
// codellm where its time went.
type ScalingRow struct {
	LoadResult
	// MachineBusy is the share of every core's time that was busy during the row (1 = all cores).
	MachineBusy float64 `json:"machine_busy"`
	// Kernel is the CPU of kernel threads and interrupts per request, by kind: kworker (workqueues: the
	// network namespace's teardown, cgroup release and freeing), rcu (grace-period kthreads, the
	// expedited ones mount teardown waits for), softirq (ksoftirqd), other kthreads, irq (hard and soft
	// interrupt time outside threads). Not part of CPU ms/req, which is the server's process tree.
	Kernel map[string]float64 `json:"kernel_cpu_ms_per_req"`
	Parts  *ScalingParts      `json:"parts,omitempty"`
}

// ScalingParts splits a codellm row per request (milliseconds): the CPU of the server itself, its
// spawners and the blocks (helpers, inits and programs: the rest of its tree), and the serial resources of
// /metrics (codellm_sandbox_serial_*, go_sync_mutex_wait_total_seconds_total). SerialBound is the rate
// those resources allow: spawners / max(held, busy) for the spawners, 1 / (make + remove) for the cgroups
// (whose kernel work is under one host-wide lock; their wall time includes parts outside it, so the
// bound is conservative).
type ScalingParts struct {
	ServerCPU    float64 `json:"server_cpu"`
	SpawnerCPU   float64 `json:"spawner_cpu"`
	BlockCPU     float64 `json:"block_cpu"`
	Spawners     int     `json:"spawners"`
	SpawnerHeld  float64 `json:"spawner_held"`
	SpawnerBusy  float64 `json:"spawner_busy"`
	SpawnerWait  float64 `json:"spawner_wait"`
	CgroupMake   float64 `json:"cgroup_make"`
	CgroupRemove float64 `json:"cgroup_remove"`
	LockWait     float64 `json:"lock_wait"`
	SerialBound  float64 `json:"serial_bound_rps"`
}

// scalingLevels are the concurrencies of the scaling row (--scaling-c).
var scalingLevels = []int{1, 4, 16, 32, 64}

// The levels of the extra rows: chat bash where the 16-core target is read, python where go-judge's is.
const (
	scalingChatC   = 32
	scalingPythonC = 16
)

// measureScaling starts codellm serve (and go-judge) and runs the scaling rows, each once for d after a
// warm-up, go-judge's and codellm's of a level back to back.
func measureScaling(levels []int, d time.Duration, logf func(string, ...any)) (*ScalingResult, error) {
	sv, err := startServers("scaling", logf)
	if err != nil {
		return nil, err
	}
	defer sv.stop()
	s, pr := sv.s, sv.peer
	res := &ScalingResult{Mode: harness.sandbox, RowSeconds: d.Seconds(), Levels: levels, Peer: sv.peerName(), PeerSkip: pr.skip}
	settle()
	for _, r := range scalingRows(s, pr.s, levels) {
		row, err := r.measure(d)
		if err != nil {
			return nil, fmt.Errorf("scaling: %w\nserver log:\n%s", err, r.srv.logs.String())
		}
		logf("scaling: %s %s %s c%d: %.0f req/s p50 %.2f ms, %.2f CPU ms/req, machine %.0f %% busy", row.System, row.Endpoint,
			row.Lang, row.Concurrency, row.RPS, row.P50, row.ServerCPU, 100*row.MachineBusy)
		res.Rows = append(res.Rows, row)
	}
	return res, nil
}

// scalingRows lists the rows in the order they run.
func scalingRows(s, gj *server, levels []int) []*loadRow {
	bash, python := programs[0], programs[1]
	var rows []*loadRow
	pair := func(p program, c int) {
		if gj != nil {
			rows = append(rows, &loadRow{srv: gj, system: "go-judge", path: pathGoJudge, body: p.goJudgeBody(), want: stdoutWant, lang: p.lang, conc: c})
		}
		rows = append(rows, &loadRow{srv: s, system: "codellm", path: pathExecute, body: p.executeBody(), want: stdoutWant, lang: p.lang, conc: c})
	}
	for _, c := range levels {
		pair(bash, c)
	}
	rows = append(rows, &loadRow{srv: s, system: "codellm", path: pathChat, body: bash.chatBody(), want: chatWant, lang: bash.lang, conc: scalingChatC})
	pair(python, scalingPythonC)
	return rows
}

// measure runs the row once and splits its time.
func (r *loadRow) measure(d time.Duration) (ScalingRow, error) {
	codellm := r.system == "codellm"
	before, err := takeSnapshot(r.srv, codellm)
	if err != nil {
		return ScalingRow{}, err
	}
	if err := r.round(d); err != nil {
		return ScalingRow{}, err
	}
	after, err := takeSnapshot(r.srv, codellm)
	if err != nil {
		return ScalingRow{}, err
	}
	row := ScalingRow{LoadResult: r.result(), Kernel: map[string]float64{}}
	per := func(x float64) float64 { return round3(x / float64(r.reqs)) }
	perDur := func(a, b time.Duration) float64 { return per(float64(b-a) / float64(time.Millisecond)) }
	if wall := after.at.Sub(before.at); wall > 0 {
		row.MachineBusy = round3(float64(after.machine-before.machine) / float64(wall) / float64(runtime.NumCPU()))
	}
	for k, v := range after.kernel {
		row.Kernel[k] = perDur(before.kernel[k], v)
	}
	if codellm {
		p := &ScalingParts{ServerCPU: perDur(before.own, after.own), SpawnerCPU: perDur(0, spawnerGrowth(before.spawners, after.spawners)),
			Spawners: int(after.metrics["spawners"])}
		p.BlockCPU = round3(perDur(before.tree, after.tree) - p.ServerCPU - p.SpawnerCPU)
		m := func(k string) float64 { return per(1000 * (after.metrics[k] - before.metrics[k])) }
		p.SpawnerHeld, p.SpawnerBusy, p.SpawnerWait = m("spawner_held"), m("spawner_busy"), m("spawner_wait")
		p.CgroupMake, p.CgroupRemove, p.LockWait = m("cgroup_make"), m("cgroup_remove"), m("lock_wait")
		p.SerialBound = serialBound(p)
		row.Parts = p
	}
	return row, nil
}

// serialBound is the rate the serial resources allow (see ScalingParts), 0 when none was measured.
func serialBound(p *ScalingParts) float64 {
	var bound float64
	if sp := max(p.SpawnerHeld, p.SpawnerBusy); sp > 0 && p.Spawners > 0 {
		bound = float64(p.Spawners) * 1000 / sp
	}
	if cg := p.CgroupMake + p.CgroupRemove; cg > 0 && (bound == 0 || 1000/cg < bound) {
		bound = 1000 / cg
	}
	return round3(bound)
}

// snapshot is what a row reads before and after its load.
type snapshot struct {
	at        time.Time
	machine   time.Duration
	tree, own time.Duration         // the server's tree, the server alone
	spawners  map[int]time.Duration // its spawner children by PID
	kernel    map[string]time.Duration
	metrics   map[string]float64 // seconds (and the spawner count), see scrapeSerial
}

func takeSnapshot(s *server, codellm bool) (snapshot, error) {
	sn := snapshot{at: time.Now()}
	var err error
	if sn.machine, err = machineBusy(); err != nil {
		return sn, err
	}
	if sn.kernel, err = kernelCPU(); err != nil {
		return sn, err
	}
	pid := s.cmd.Process.Pid
	if sn.tree, err = treeCPU(pid); err != nil {
		return sn, err
	}
	if !codellm {
		return sn, nil
	}
	if sn.own, sn.spawners, err = serverAndSpawners(pid); err != nil {
		return sn, err
	}
	sn.metrics, err = scrapeSerial(s.base)
	return sn, err
}

// serverAndSpawners is the CPU of the server process itself (its threads, not what it reaped) and of each
// of its children named codellm-spawner, by PID.
func serverAndSpawners(pid int) (own time.Duration, spawners map[int]time.Duration, err error) {
	st, err := readStat(pid)
	if err != nil {
		return 0, nil, err
	}
	spawners = map[int]time.Duration{}
	// Each thread lists the children it started: the spawners are started from locked threads.
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
	for _, t := range tasks {
		b, _ := os.ReadFile(t)
		for _, f := range strings.Fields(string(b)) {
			c, err := strconv.Atoi(f)
			if err != nil {
				continue
			}
			if cs, err := readStat(c); err == nil && cs.comm == "codellm-spawner" {
				spawners[c] = cs.own
			}
		}
	}
	return st.own, spawners, nil
}

// spawnerGrowth is the spawners' CPU between two readings: a spawner started meanwhile counts whole; one
// that ended meanwhile (replaced with fresh overlays once a minute) moved its time into the server's
// reaped children's, which the row counts with the blocks.
func spawnerGrowth(before, after map[int]time.Duration) time.Duration {
	var d time.Duration
	for pid, c := range after {
		d += c - before[pid]
	}
	return d
}

// procFacts are the fields of /proc/PID/stat the scaling row reads.
type procFacts struct {
	comm    string
	kthread bool
	own     time.Duration // utime + stime
}

// pfKthread is the kernel's PF_KTHREAD task flag (field 9 of /proc/PID/stat).
const pfKthread = 0x00200000

func readStat(pid int) (procFacts, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procFacts{}, err
	}
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return procFacts{}, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(string(b[end+1:]))
	if len(f) < 13 { // f[0] is field 3; flags is field 9, utime and stime are 14 and 15
		return procFacts{}, fmt.Errorf("short /proc/%d/stat", pid)
	}
	flags, _ := strconv.ParseUint(f[6], 10, 64)
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return procFacts{comm: string(b[open+1 : end]), kthread: flags&pfKthread != 0, own: time.Duration(ut+st) * 10 * time.Millisecond}, nil
}

// kernelCPU is the CPU time kernel threads have used so far by kind (see ScalingRow.Kernel), and the
// machine's interrupt time. A kworker that exits takes its time with it: the kworker figure is a floor.
func kernelCPU() (map[string]time.Duration, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	out := map[string]time.Duration{"kworker": 0, "rcu": 0, "softirq": 0, "other": 0}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := readStat(pid)
		if err != nil || !st.kthread {
			continue
		}
		out[kthreadKind(st.comm)] += st.own
	}
	irq, err := interruptTime()
	out["irq"] = irq
	return out, err
}

func kthreadKind(comm string) string {
	switch {
	case strings.HasPrefix(comm, "kworker"):
		return "kworker"
	case strings.HasPrefix(comm, "rcu"):
		return "rcu"
	case strings.HasPrefix(comm, "ksoftirqd"):
		return "softirq"
	}
	return "other"
}

// interruptTime is the irq and softirq columns of /proc/stat's first line.
func interruptTime() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 {
		return 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var ticks int64
	for _, v := range f[6:8] {
		n, _ := strconv.ParseInt(v, 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

// scrapeSerial reads the serial resources from the server's /metrics: the seconds of
// codellm_sandbox_serial_seconds_total by resource, "lock_wait" (go_sync_mutex_wait_total_seconds_total)
// and "spawners" (codellm_sandbox_spawners).
func scrapeSerial(base string) (map[string]float64, error) {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("/metrics: %d %s", resp.StatusCode, b)
	}
	return parseSerial(resp.Body)
}

func parseSerial(r io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, value, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			continue
		}
		switch {
		case strings.HasPrefix(name, `codellm_sandbox_serial_seconds_total{resource="`):
			out[strings.TrimSuffix(strings.TrimPrefix(name, `codellm_sandbox_serial_seconds_total{resource="`), `"}`)] = v
		case name == "go_sync_mutex_wait_total_seconds_total":
			out["lock_wait"] = v
		case name == "codellm_sandbox_spawners":
			out["spawners"] = v
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if _, ok := out["spawner_held"]; !ok {
		return nil, fmt.Errorf("/metrics has no codellm_sandbox_serial_seconds_total: a codellm older than the scaling row")
	}
	return out, nil
}

// find returns the scaling row of system, endpoint, program and concurrency, or nil.
func (s *ScalingResult) find(system, path, lang string, c int) *ScalingRow {
	for i := range s.Rows {
		if r := &s.Rows[i]; r.System == system && r.Endpoint == path && r.Lang == lang && r.Concurrency == c {
			return r
		}
	}
	return nil
}

// scalingTargets are issue 37's: the 16-core rate (on a host of 16 cores or more), and the ratios that
// hold on any host.
func scalingTargets(s *ScalingResult, cores int) []Target {
	var ts []Target
	c1, g1 := s.find("codellm", pathExecute, "bash", 1), s.find("go-judge", pathGoJudge, "bash", 1)
	if c1 != nil && g1 != nil {
		ts = append(ts, atMost("scaling.c1_p50_over_gojudge_ms", "`/api/v2/execute` bash p50 at c=1 ≤ go-judge's + 1 ms", round3(c1.P50-g1.P50), 1))
	}
	ex, chat := s.find("codellm", pathExecute, "bash", scalingChatC), s.find("codellm", pathChat, "bash", scalingChatC)
	if ex != nil && chat != nil {
		ts = append(ts, atLeast("scaling.chat_vs_execute", fmt.Sprintf("chat bash req/s at c=%d ≥ 0.9 × `/api/v2/execute`'s", scalingChatC), ratio(chat.RPS, ex.RPS), 0.9))
	}
	if ex != nil && cores >= 16 {
		ts = append(ts, atLeast("scaling.execute_c32_rps", fmt.Sprintf("`/api/v2/execute` bash at c=%d ≥ 2500 req/s (16 cores)", scalingChatC), ex.RPS, 2500))
	}
	py, gpy := s.find("codellm", pathExecute, "python", scalingPythonC), s.find("go-judge", pathGoJudge, "python", scalingPythonC)
	if py != nil && gpy != nil {
		ts = append(ts, atLeast("scaling.python_c16_vs_gojudge", fmt.Sprintf("`/api/v2/execute` python req/s at c=%d ≥ 0.9 × go-judge's", scalingPythonC), ratio(py.RPS, gpy.RPS), 0.9))
	}
	return ts
}

// scalingMarkdown renders the scaling row: the rates side by side, then where codellm's time went.
func scalingMarkdown(b *strings.Builder, s *ScalingResult) {
	fmt.Fprintf(b, "### 2b. Scaling (`--sandbox %s`, %.0f s per row after a warm-up, one row of each system per level)\n\n", s.Mode, s.RowSeconds)
	if s.Peer == "" {
		fmt.Fprintf(b, "No peer rows: %s.\n\n", s.PeerSkip)
	}
	b.WriteString("| program | c | go-judge req/s | p50 ms | CPU ms/req | machine busy | codellm endpoint | req/s | p50 ms | CPU ms/req | machine busy | req/s ratio |\n" +
		"|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|\n")
	for _, r := range s.Rows {
		if r.System != "codellm" {
			continue
		}
		g := s.find("go-judge", pathGoJudge, r.Lang, r.Concurrency)
		gj := "| – | – | – | – "
		var rat float64
		if g != nil {
			gj = fmt.Sprintf("| %.0f | %.2f | %.2f | %.0f %% ", g.RPS, g.P50, g.ServerCPU, 100*g.MachineBusy)
			rat = ratio(r.RPS, g.RPS)
		}
		fmt.Fprintf(b, "| %s | %d %s| `%s` | %.0f | %.2f | %.2f | %.0f %% | %s |\n", r.Lang, r.Concurrency, gj, r.Endpoint, r.RPS, r.P50,
			r.ServerCPU, 100*r.MachineBusy, orDash(rat))
	}
	b.WriteString("\nWhere codellm's time went, per request (ms): the CPU of the server, its spawners and the blocks " +
		"(helpers, inits, programs); kernel threads (kworker, rcu, ksoftirqd and interrupts, other); and the busy time of " +
		"what blocks pass through one at a time (`/metrics`), with the rate those allow (serial bound).\n\n")
	b.WriteString("| endpoint | program | c | server | spawners | blocks | kworker | rcu | softirq+irq | other kthreads | spawners running | spawner held | spawner busy | spawner wait | cgroup make | cgroup remove | Go lock wait | serial bound req/s |\n" +
		"|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range s.Rows {
		p := r.Parts
		if p == nil {
			continue
		}
		k := r.Kernel
		fmt.Fprintf(b, "| `%s` | %s | %d | %.2f | %.2f | %.2f | %.3f | %.3f | %.3f | %.3f | %d | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.0f |\n",
			r.Endpoint, r.Lang, r.Concurrency, p.ServerCPU, p.SpawnerCPU, p.BlockCPU, k["kworker"], k["rcu"], k["softirq"]+k["irq"], k["other"],
			p.Spawners, p.SpawnerHeld, p.SpawnerBusy, p.SpawnerWait, p.CgroupMake, p.CgroupRemove, p.LockWait, p.SerialBound)
	}
	b.WriteString("\n")
}
