package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Row is one configuration's figures.
type Row struct {
	Workers  int `json:"workers"`
	Replicas int `json:"replicas"`
	// Idle: per waiting worker.
	IdleCmdsPerWorkerSec float64 `json:"idleRedisCommandsPerWorkerSecond"`
	IdleCPUPerWorkerSec  float64 `json:"idleHubCPUSecondsPerWorkerSecond"`
	// Assign: per assignment, with the idle rates over the same time subtracted.
	CmdsPerAssignment float64 `json:"redisCommandsPerAssignment"`
	CPUPerAssignment  float64 `json:"hubCPUSecondsPerAssignment"`
	AssignmentsPerSec float64 `json:"assignmentsPerSecond"`
	Errors            int64   `json:"errors"`
}

func (r *Row) String() string {
	return fmt.Sprintf("%d workers, %d replicas: idle %.2f cmd/s %.3f ms/s per worker; %.1f cmds %.2f ms per assignment, %.0f/s; %d errors",
		r.Workers, r.Replicas, r.IdleCmdsPerWorkerSec, r.IdleCPUPerWorkerSec*1000, r.CmdsPerAssignment, r.CPUPerAssignment*1000, r.AssignmentsPerSec, r.Errors)
}

// fleet is R hub replicas with N simulated workers polling them.
type fleet struct {
	redis   *redisServer
	hubs    []*hubProc
	workers []*simWorker
	stats   workerStats
	cancel  context.CancelFunc
	done    sync.WaitGroup
	client  *http.Client
	n, r    int
}

// newFleet starts r replicas and n workers (paired, polling), each worker on replica i%r.
func newFleet(p params, rs *redisServer, boltPath string, n, r int, runFor time.Duration) (*fleet, error) {
	f := &fleet{redis: rs, n: n, r: r,
		client: &http.Client{Transport: &http.Transport{MaxIdleConns: 4 * n, MaxIdleConnsPerHost: 2 * n}}}
	store := boltPath
	if rs != nil {
		if err := rs.flush(); err != nil {
			return nil, err
		}
		store = rs.url
	}
	env := []string{"CODELLM_HUB_MAX_WORKER_CONNECTIONS=" + strconv.Itoa(4*n+64)}
	for range r {
		h, err := startHub(p.bin, store, env)
		if err != nil {
			f.stop()
			return nil, err
		}
		f.hubs = append(f.hubs, h)
	}
	for i := range n {
		f.workers = append(f.workers, newSimWorker(fmt.Sprintf("sim-%04d", i), f.hubs[i%r].root+"/v1", f.client, runFor, &f.stats))
	}
	if err := f.pair(); err != nil {
		f.stop()
		return nil, fmt.Errorf("pairing: %w", err)
	}
	var ctx context.Context
	ctx, f.cancel = context.WithCancel(context.Background())
	for _, w := range f.workers {
		f.done.Add(1)
		go func() { defer f.done.Done(); w.run(ctx) }()
	}
	// Every worker registered and parked in its long poll.
	time.Sleep(2*time.Second + time.Duration(n)*2*time.Millisecond)
	return f, nil
}

// pair pairs every worker, 16 at a time.
func (f *fleet) pair() error {
	sem := make(chan struct{}, 16)
	errs := make(chan error, len(f.workers))
	for _, w := range f.workers {
		sem <- struct{}{}
		go func() { defer func() { <-sem }(); errs <- w.pair(context.Background(), adminToken) }()
	}
	for range f.workers {
		if err := <-errs; err != nil {
			return err
		}
	}
	return nil
}

func (f *fleet) stop() {
	if f.cancel != nil {
		f.cancel()
		f.done.Wait()
	}
	for _, h := range f.hubs {
		h.kill()
	}
	f.client.CloseIdleConnections()
}

// snapshot is the store's command count and the replicas' CPU at one moment.
type snapshot struct {
	at   time.Time
	cmds int64
	cpu  time.Duration
}

func (f *fleet) snap() (snapshot, error) {
	s := snapshot{at: time.Now()}
	for _, h := range f.hubs {
		c, err := h.cpu()
		if err != nil {
			return s, err
		}
		s.cpu += c
	}
	if f.redis != nil {
		var err error
		s.cmds, err = f.redis.commands()
		return s, err
	}
	return s, nil
}

// measure runs the idle window, then the assignments.
func (f *fleet) measure(p params) (*Row, error) {
	row := &Row{Workers: f.n, Replicas: f.r}
	a, err := f.snap()
	if err != nil {
		return nil, err
	}
	time.Sleep(p.idle)
	b, err := f.snap()
	if err != nil {
		return nil, err
	}
	secs := b.at.Sub(a.at).Seconds()
	idleCmds, idleCPU := float64(b.cmds-a.cmds)/secs, (b.cpu-a.cpu).Seconds()/secs
	row.IdleCmdsPerWorkerSec, row.IdleCPUPerWorkerSec = idleCmds/float64(f.n), idleCPU/float64(f.n)

	errs := f.stats.errors.Load()
	wrong, err := f.load(p.assignments, p.concurrency)
	if err != nil {
		return nil, err
	}
	c, err := f.snap()
	if err != nil {
		return nil, err
	}
	secs = c.at.Sub(b.at).Seconds()
	m := float64(p.assignments)
	row.CmdsPerAssignment = (float64(c.cmds-b.cmds) - idleCmds*secs) / m
	row.CPUPerAssignment = ((c.cpu - b.cpu).Seconds() - idleCPU*secs) / m
	row.AssignmentsPerSec = m / secs
	row.Errors = f.stats.errors.Load() - errs + wrong
	return row, nil
}

// load sends m requests with c concurrent clients, spread over the replicas; it returns how many were
// not answered 200 with their own result.
func (f *fleet) load(m, c int) (int64, error) {
	var next, wrong atomic.Int64
	var wg sync.WaitGroup
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(m) {
					return
				}
				if _, ok := f.exec(f.hubs[int(i)%f.r].root, "c-"+strconv.FormatInt(i, 10)); !ok {
					wrong.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return wrong.Load(), nil
}

// exec posts one /v1/exec and reports its status and whether it came back 200 with its own result.
func (f *fleet) exec(root, code string) (int, bool) {
	b, _ := json.Marshal(map[string]string{"lang": "py", "code": code})
	req, _ := http.NewRequest(http.MethodPost, root+"/v1/exec", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", apiKey)
	resp, err := f.client.Do(req)
	if err != nil {
		return -1, false
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out struct {
		Stdout string `json:"stdout"`
	}
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, resp.StatusCode == http.StatusOK && out.Stdout == "ran:"+code
}

// OverloadRow is the fairness measurement: more clients than workers, each client sending requests back
// to back; the queue wait of an answered request is its latency less the run time.
type OverloadRow struct {
	Clients     int           `json:"clients"`
	Workers     int           `json:"workers"`
	RunFor      time.Duration `json:"runFor"`
	Answered    int           `json:"answered"`
	RateLimited int           `json:"rateLimited"`
	P50         float64       `json:"queueWaitP50Seconds"`
	P90         float64       `json:"queueWaitP90Seconds"`
	Ratio       float64       `json:"p90OverP50"`
}

func overload(p params, rs *redisServer, boltPath string) (*OverloadRow, error) {
	const clients, workers, runFor = 16, 2, 200 * time.Millisecond
	f, err := newFleet(p, rs, boltPath, workers, 1, runFor)
	if err != nil {
		return nil, err
	}
	defer f.stop()
	o := &OverloadRow{Clients: clients, Workers: workers, RunFor: runFor}
	var mu sync.Mutex
	var waits []float64
	end := time.Now().Add(p.overload)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; time.Now().Before(end); j++ {
				t0 := time.Now()
				st, ok := f.exec(f.hubs[0].root, fmt.Sprintf("o-%d-%d", i, j))
				d := time.Since(t0) - runFor
				mu.Lock()
				switch {
				case ok:
					waits = append(waits, d.Seconds())
				case st == http.StatusTooManyRequests:
					o.RateLimited++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	slices.Sort(waits)
	o.Answered = len(waits)
	if len(waits) > 0 {
		o.P50, o.P90 = waits[len(waits)/2], waits[len(waits)*9/10]
		if o.P50 > 0 {
			o.Ratio = o.P90 / o.P50
		}
	}
	return o, nil
}
