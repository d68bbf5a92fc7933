package main

import (
	"fmt"
	"strings"

	"github.com/codellm/codellm/internal/interp"
)

var lookInterp = interp.LookPath

// Target is one goal of issue 4 and how this run did against it.
type Target struct {
	Name     string  `json:"name"`
	Goal     string  `json:"goal"`
	Measured float64 `json:"measured"`
	Limit    float64 `json:"limit"`
	Met      bool    `json:"met"`
	// Margin is limit/measured for "at most" goals and measured/limit for "at least" goals: above 1 the
	// target is met by that factor, below 1 it is missed by it.
	Margin float64 `json:"margin"`
}

func atMost(name, goal string, got, limit float64) Target {
	t := Target{Name: name, Goal: goal, Measured: got, Limit: limit, Met: got <= limit}
	if got > 0 {
		t.Margin = round3(limit / got)
	}
	return t
}

func atLeast(name, goal string, got, limit float64) Target {
	return Target{Name: name, Goal: goal, Measured: got, Limit: limit, Met: got >= limit, Margin: ratio(got, limit)}
}

func targets(r *Results) []Target {
	var ts []Target
	if s := r.Spawn; s != nil {
		if s.BwrapP50 > 0 {
			ts = append(ts, atMost("spawn.codellm_over_bwrap", "codellm p50 ≤ 0.8 × bubblewrap p50", s.OverBwrap, 0.8))
		}
		ts = append(ts, atMost("spawn.codellm_overhead_ms", "codellm p50 ≤ bare p50 + 3 ms", s.OverheadMs, 3))
	}
	if s := r.Service; s != nil {
		ts = append(ts,
			atMost("service.c1_p50_ms", "chat p50 at concurrency 1 ≤ 4 ms", s.C1P50, 4),
			atLeast("service.c4_rps", "chat ≥ 400 requests/s at concurrency 4", s.C4RPS, 400),
			atMost("service.rss_mib", "server peak RSS ≤ 60 MiB", s.RSSMiB, 60))
	}
	if p := r.Pipeline; p != nil {
		ts = append(ts, atLeast("pipeline.ratio", "3 cat blocks ≥ 0.7 × bash cat\\|cat\\|cat", p.Ratio, 0.7))
	}
	return ts
}

// markdown renders the run as the tables of BENCHMARKS.md.
func markdown(r *Results) string {
	var b strings.Builder
	m := r.Machine
	fmt.Fprintf(&b, "Run %s (%s, %.0f s). Machine: %s, %d cores, %s, %d MiB RAM, %s. Load average (1 min) %.2f before, %.2f after.\n\n",
		r.Started.Format("2006-01-02 15:04 UTC"), map[bool]string{true: "--quick", false: "full"}[r.Quick], r.Seconds,
		m.CPUModel, m.Cores, m.Kernel, m.MemMiB, m.GoVersion, m.LoadBefore, m.LoadAfter)
	if m.Cgo {
		b.WriteString("The harness was a cgo build: its spawn rows include the dynamic loader in codellm's helper (the release binary is static).\n\n")
	}
	if s := r.Spawn; s != nil {
		fmt.Fprintf(&b, "### 1. Sandbox spawn (`true`, %d interleaved rounds)\n\n", s.Runs)
		b.WriteString("| variant | p50 ms | p99 ms | min ms | CPU ms | p50 / bare | p50 / bwrap | CPU / bwrap |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
		bw := s.Variants["bwrap"]
		for _, v := range []struct{ key, name string }{
			{"bare", "bare `true`"},
			{"go-exec", "a Go binary exiting from its init (runtime start only)"},
			{"unshare", "`unshare -Urmpfn --mount-proc`"},
			{"bwrap", "bubblewrap, codellm-like root"},
			{"codellm", "codellm: new run + block + close"},
			{"codellm-block", "codellm: one more block in a run"},
		} {
			x, ok := s.Variants[v.key]
			if !ok {
				continue
			}
			fmt.Fprintf(&b, "| %s | %.3f | %.3f | %.3f | %.3f | %.2f | %s | %s |\n", v.name, x.P50, x.P99, x.Min, x.CPU,
				ratio(x.P50, s.BareP50), orDash(ratio(x.P50, bw.P50)), orDash(ratio(x.CPU, bw.CPU)))
		}
		for _, sk := range s.Skipped {
			fmt.Fprintf(&b, "\nSkipped: %s\n", sk)
		}
		b.WriteString("\n")
	}
	if s := r.Service; s != nil {
		b.WriteString("### 2. Service end to end (`codellm serve`, one bash `echo` block)\n\n")
		b.WriteString("| endpoint | concurrency | requests | req/s | p50 ms | p99 ms | server CPU ms/req | CPU-bound req/s |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, l := range s.Rows {
			fmt.Fprintf(&b, "| `%s` | %d | %d | %.1f | %.3f | %.3f | %.2f | %.0f |\n", l.Endpoint, l.Concurrency, l.Requests, l.RPS, l.P50, l.P99, l.ServerCPU, l.CPUBoundRPS)
		}
		fmt.Fprintf(&b, "\nServer peak RSS (VmHWM): %.1f MiB.", s.RSSMiB)
		if !s.Runner {
			b.WriteString(" `/api/v2/execute` is not served by this build: not measured.")
		}
		b.WriteString("\n\n")
	}
	if p := r.Pipeline; p != nil {
		fmt.Fprintf(&b, "### 3. Pipeline throughput (%d MiB through three `cat` blocks, best of %d)\n\n", p.Bytes>>20, p.Reps)
		b.WriteString("| variant | MiB/s | CPU s |\n|---|---:|---:|\n")
		fmt.Fprintf(&b, "| codellm: `head -c` → cat → cat → cat → `wc -c`, 5 sandboxed blocks | %.0f | %.3f |\n", p.CodellmMiB, p.CodellmCPU)
		if p.OffMiB > 0 {
			fmt.Fprintf(&b, "| the same pipeline with `--sandbox off` (plain processes, same pipes) | %.0f | %.3f |\n", p.OffMiB, p.OffCPU)
		}
		fmt.Fprintf(&b, "| `bash -c 'head -c … \\| cat \\| cat \\| cat \\| wc -c'` | %.0f | %.3f |\n", p.BashMiB, p.BashCPU)
		fmt.Fprintf(&b, "| ratio (codellm/bash throughput; bash/codellm CPU) | %.3f | %.3f |\n\n", p.Ratio, p.CPURatio)
	}
	if r.Python != nil || r.Node != nil {
		b.WriteString("### 4. Interpreter latency (empty program; one-block pipeline vs bare interpreter)\n\n")
		b.WriteString("| interpreter | runs | bare p50 ms | codellm p50 ms | bare p99 ms | codellm p99 ms | overhead ms | ratio |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, x := range []struct {
			n string
			r *InterpResult
		}{{"python3 (`pass`)", r.Python}, {"node (empty)", r.Node}} {
			if x.r != nil {
				fmt.Fprintf(&b, "| %s | %d | %.3f | %.3f | %.3f | %.3f | %.3f | %.2f |\n", x.n, x.r.Runs, x.r.BareP50, x.r.CodellmP50,
					x.r.BareP99, x.r.CodellmP99, x.r.OverheadMs, x.r.Ratio)
			}
		}
		b.WriteString("\n")
	}
	for k, v := range r.Skipped {
		fmt.Fprintf(&b, "Skipped %s: %s\n\n", k, v)
	}
	if len(r.Targets) > 0 {
		b.WriteString("### Targets\n\n| target | goal | measured | met | margin |\n|---|---|---:|:-:|---:|\n")
		for _, t := range r.Targets {
			fmt.Fprintf(&b, "| `%s` | %s | %.3f | %s | %.2f× |\n", t.Name, t.Goal, t.Measured, map[bool]string{true: "yes", false: "**no**"}[t.Met], t.Margin)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func orDash(f float64) string {
	if f == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", f)
}
