// Command hubload measures what `codellm hub` itself costs as its fleet grows (issue 36): N simulated
// workers speak the real bridge protocol (paired, signed, registering before every lease) to R hub
// replicas — real `codellm hub serve` processes — on one Redis (or one hub on its bbolt file). No sandbox
// runs behind them, so what is measured is the hub's and the store's share:
//
//   - idle: Redis commands per second and hub CPU per second, per waiting worker;
//
//   - assign: Redis commands and hub CPU per assignment (the idle rate subtracted), and assignments/s;
//
//   - overload: 16 clients on 2 busy workers, the queue wait's p50 and p90 (and their ratio).
//
//     go run ./bench/hubload                                   # 100,300,1000 workers × 1,2,3 replicas
//     go run ./bench/hubload --workers 100 --replicas 1 --quick
//     go run ./bench/hubload --codellm /path/to/old/codellm    # measure another build
//     go run ./bench/hubload --rate http://127.0.0.1:8090 --rate-api exec --rate-key K -c 16   # real sandboxes
//
// Every client checks it got its own answer; a wrong or missing one is counted and fails the run.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

const (
	adminToken = "hubload-admin-token"
	apiKey     = "hubload-client-key"
)

// params size a run.
type params struct {
	bin         string
	store       string // redis or bolt
	redisURL    string
	workers     []int
	replicas    []int
	idle        time.Duration
	assignments int
	concurrency int
	overload    time.Duration
}

// Results is the JSON document of a run.
type Results struct {
	Started  time.Time    `json:"started"`
	Store    string       `json:"store"`
	Rows     []Row        `json:"rows"`
	Overload *OverloadRow `json:"overload,omitempty"`
	Seconds  float64      `json:"seconds"`
}

func main() {
	var p params
	workers := flag.String("workers", "100,300,1000", "comma-separated fleet sizes")
	replicas := flag.String("replicas", "1,2,3", "comma-separated replica counts (redis store)")
	flag.StringVar(&p.bin, "codellm", "", "codellm binary to measure (default: build ./cmd/codellm)")
	flag.StringVar(&p.store, "store", "redis", "redis, or bolt (one replica on an embedded store file)")
	flag.StringVar(&p.redisURL, "redis", "", "redis://HOST:PORT/DB to use (default: start redis-server; the database is flushed)")
	flag.DurationVar(&p.idle, "idle", 20*time.Second, "idle measurement window")
	flag.IntVar(&p.assignments, "assignments", 300, "assignments per configuration")
	flag.IntVar(&p.concurrency, "concurrency", 8, "concurrent clients of the assign phase")
	flag.DurationVar(&p.overload, "overload", 20*time.Second, "overload phase length (0: skip)")
	quick := flag.Bool("quick", false, "short windows: 5 s idle, 60 assignments, 8 s overload")
	jsonOut := flag.String("json", "", "write the results as JSON to `FILE`")
	var rp rateParams
	flag.StringVar(&rp.url, "rate", "", "instead of the fleet: send one program to `URL` (a hub or a codellm serve) and report requests/s")
	flag.StringVar(&rp.api, "rate-api", "exec", "exec (the hub's /v1/exec) or piston (serve's /api/v2/execute)")
	flag.StringVar(&rp.key, "rate-key", "", "API key (sent as Authorization: Bearer)")
	flag.StringVar(&rp.program, "rate-program", "print(1)", "the python program")
	flag.IntVar(&rp.c, "c", 16, "--rate: concurrent clients")
	flag.DurationVar(&rp.d, "d", 30*time.Second, "--rate: duration")
	flag.Parse()
	if rp.url != "" {
		runRate(rp, *jsonOut)
		return
	}
	if *quick {
		p.idle, p.assignments, p.overload = 5*time.Second, 60, 8*time.Second
	}
	var err error
	if p.workers, err = ints(*workers); err == nil {
		p.replicas, err = ints(*replicas)
	}
	if err != nil {
		fail(err)
	}
	res, err := run(p)
	if err != nil {
		fail(err)
	}
	fmt.Print(markdown(res))
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(*jsonOut, b, 0o644); err != nil {
			fail(err)
		}
	}
}

// runRate is the --rate mode.
func runRate(rp rateParams, jsonOut string) {
	res, err := rate(rp)
	if err != nil {
		fail(err)
	}
	fmt.Printf("%s c=%d: %.1f requests/s (%d ok, %d failed), latency p50 %.3f s, p90 %.3f s\n",
		res.API, res.Clients, res.PerSecond, res.OK, res.Failed, res.P50, res.P90)
	if jsonOut != "" {
		b, _ := json.Marshal(res)
		if err := os.WriteFile(jsonOut, b, 0o644); err != nil {
			fail(err)
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "hubload:", err)
	os.Exit(1)
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q: want positive integers", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// run measures every configuration, then the overload phase.
func run(p params) (*Results, error) {
	start := time.Now()
	tmp, err := os.MkdirTemp("", "hubload-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	if p.bin == "" {
		if p.bin, err = buildCodellm(tmp); err != nil {
			return nil, err
		}
	}
	res := &Results{Started: start, Store: p.store}
	var rs *redisServer
	if p.store == "redis" {
		if rs, err = startRedis(p.redisURL); err != nil {
			return nil, err
		}
		defer rs.stop()
	} else {
		p.replicas = []int{1}
	}
	for _, n := range p.workers {
		for _, r := range p.replicas {
			fl, err := newFleet(p, rs, filepath.Join(tmp, fmt.Sprintf("bolt-%d-%d", n, r)), n, r, 0)
			if err != nil {
				return nil, err
			}
			row, err := fl.measure(p)
			fl.stop()
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(os.Stderr, "hubload: %s\n", row)
			res.Rows = append(res.Rows, *row)
		}
	}
	if p.overload > 0 {
		if res.Overload, err = overload(p, rs, filepath.Join(tmp, "bolt-overload")); err != nil {
			return nil, err
		}
	}
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}

// markdown renders the results.
func markdown(res *Results) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| store | workers | replicas | idle Redis cmd/s per worker | idle hub CPU ms/s per worker | Redis cmds per assignment | hub CPU ms per assignment | assignments/s | errors |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range res.Rows {
		fmt.Fprintf(&b, "| %s | %d | %d | %.2f | %.3f | %.1f | %.2f | %.0f | %d |\n", res.Store, r.Workers, r.Replicas,
			r.IdleCmdsPerWorkerSec, r.IdleCPUPerWorkerSec*1000, r.CmdsPerAssignment, r.CPUPerAssignment*1000, r.AssignmentsPerSec, r.Errors)
	}
	if o := res.Overload; o != nil {
		fmt.Fprintf(&b, "\noverload: %d clients, %d workers (%v runs), %d answered: queue wait p50 %.2f s, p90 %.2f s, p90/p50 %.2f; %d refused 429\n",
			o.Clients, o.Workers, o.RunFor, o.Answered, o.P50, o.P90, o.Ratio, o.RateLimited)
	}
	return b.String()
}
