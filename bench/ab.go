package main

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// ABResult compares two codellm binaries side by side (--ab OLD,NEW): both servers run at once and
// the load alternates between them in short bursts, so that the machine's drift (this VM's speed moves by
// 15 % and more within seconds) falls on both alike. Back-to-back runs of one binary cannot resolve a
// change of a few per cent here; bursts of half a second interleaved over half a minute can.
type ABResult struct {
	Binaries    [2]string `json:"binaries"`
	Endpoint    string    `json:"endpoint"`
	Program     string    `json:"program"`
	Concurrency int       `json:"concurrency"`
	BurstMS     float64   `json:"burst_ms"`
	Bursts      int       `json:"bursts_each"`
	Rows        [2]ABRow  `json:"rows"`
	Machine     Machine   `json:"machine"`
	// P50Ratio and RPSRatio are the second binary's over the first's (p50 < 1 and req/s > 1: it is ahead).
	P50Ratio float64 `json:"p50_ratio"`
	RPSRatio float64 `json:"rps_ratio"`
}

// ABRow is one binary's share of an A/B run: every measured request of every burst.
type ABRow struct {
	Requests int     `json:"requests"`
	RPS      float64 `json:"rps"`
	P50      float64 `json:"p50_ms"`
	P99      float64 `json:"p99_ms"`
}

// abParams are the --ab flags.
type abParams struct {
	bins         [2]string
	program      string // bash or python
	endpoint     string // execute or chat
	conc         int
	burst, total time.Duration
}

// measureAB runs the A/B comparison: both servers started, then bursts of p.burst alternating A, B, A, …
// until p.total has passed (the first pair is a warm-up and not counted).
func measureAB(p abParams, logf func(string, ...any)) (*ABResult, error) {
	prog, ok := programByLabel(p.program)
	if !ok {
		return nil, fmt.Errorf("--ab-program %q: want bash or python", p.program)
	}
	path, body, want := pathExecute, prog.executeBody(), stdoutWant
	if p.endpoint == "chat" {
		path, body, want = pathChat, prog.chatBody(), chatWant
	} else if p.endpoint != "execute" {
		return nil, fmt.Errorf("--ab-endpoint %q: want execute or chat", p.endpoint)
	}
	m := probeMachine()
	var srv [2]*server
	for i, bin := range p.bins {
		dir, err := serverDir("codellm-ab-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		if srv[i], err = startServer(bin, dir); err != nil {
			return nil, fmt.Errorf("%s: %w", bin, err)
		}
		defer srv[i].stop()
	}
	logf("ab: %s %s at c=%d, bursts of %v for %v", p.program, path, p.conc, p.burst, p.total)
	var all [2]sample
	var busy [2]time.Duration
	bursts := 0
	for t0 := time.Now(); time.Since(t0) < p.total || bursts < 2; bursts++ {
		for i := range srv {
			s, el, _, err := loadPhases(srv[i].base, path, body, want, p.conc, p.burst)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", p.bins[i], err)
			}
			if bursts > 0 {
				all[i] = append(all[i], s...)
				busy[i] += el
			}
		}
	}
	res := &ABResult{Binaries: p.bins, Endpoint: path, Program: p.program, Concurrency: p.conc,
		BurstMS: ms(p.burst), Bursts: bursts - 1, Machine: m}
	res.Machine.LoadAfter = load1()
	for i := range srv {
		if len(all[i]) == 0 {
			return nil, fmt.Errorf("%s: no request completed", p.bins[i])
		}
		res.Rows[i] = ABRow{Requests: len(all[i]), RPS: round3(float64(len(all[i])) / busy[i].Seconds()),
			P50: ms(all[i].p50()), P99: ms(all[i].p99())}
	}
	res.P50Ratio = round3(res.Rows[1].P50 / res.Rows[0].P50)
	res.RPSRatio = round3(res.Rows[1].RPS / res.Rows[0].RPS)
	return res, nil
}

func programByLabel(label string) (program, bool) {
	for _, p := range programs {
		if p.label == label {
			return p, true
		}
	}
	return program{}, false
}

// abMarkdown renders an A/B result.
func abMarkdown(r *ABResult) string {
	var b strings.Builder
	m := r.Machine
	fmt.Fprintf(&b, "A/B of two codellm binaries, both serving at once, load alternating in %.0f ms bursts (%d each), "+
		"`%s` %s at c=%d. Machine: %d cores, %s, %d host mounts. Load average (1 min) %.2f before, %.2f after.\n\n",
		r.BurstMS, r.Bursts, r.Endpoint, r.Program, r.Concurrency, m.Cores, m.Kernel, m.HostMounts, m.LoadBefore, m.LoadAfter)
	b.WriteString("| binary | requests | req/s | p50 ms | p99 ms |\n|---|---:|---:|---:|---:|\n")
	for i, row := range r.Rows {
		fmt.Fprintf(&b, "| %s | %d | %.1f | %.3f | %.3f |\n", r.Binaries[i], row.Requests, row.RPS, row.P50, row.P99)
	}
	fmt.Fprintf(&b, "\nsecond over first: p50 %.3f×, req/s %.3f×\n", r.P50Ratio, r.RPSRatio)
	return b.String()
}
