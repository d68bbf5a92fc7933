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
		for _, q := range s.Ratios {
			key := "service." + endpointKey(q.Endpoint) + "." + q.Lang
			what := "`" + q.Endpoint + "` " + q.Lang
			ts = append(ts,
				atMost(key+".c1_p50_vs_gojudge", what+" p50 at c=1 ≤ 1.0 × go-judge's", q.C1P50, 1),
				atLeast(key+".c4_rps_vs_gojudge", what+" req/s at c=4 ≥ 1.0 × go-judge's", q.C4RPS, 1))
		}
		ts = append(ts, atMost("service.rss_mib", fmt.Sprintf("server peak RSS at c=%d ≤ 60 MiB", s.RSSConc), s.RSSMiB, 60))
	}
	if s := r.Scaling; s != nil {
		ts = append(ts, scalingTargets(s, r.Machine.Cores)...)
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
	fmt.Fprintf(&b, "Run %s (%s, %.0f s). Machine: %s, %d cores, %s, %d MiB RAM, %s, %d host mounts. Load average (1 min) %.2f before, %.2f after.\n\n",
		r.Started.Format("2006-01-02 15:04 UTC"), map[bool]string{true: "--quick", false: "full"}[r.Quick], r.Seconds,
		m.CPUModel, m.Cores, m.Kernel, m.MemMiB, m.GoVersion, m.HostMounts, m.LoadBefore, m.LoadAfter)
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
			{"codellm", "codellm: new run + block + close (its cgroup made ahead, as `serve` runs)"},
			{"codellm-block", "codellm: one more block in a run"},
			{"codellm-block-pid1", "the same, program exec'd as PID 1 (before the init)"},
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
		serviceMarkdown(&b, s)
	}
	if s := r.Scaling; s != nil {
		scalingMarkdown(&b, s)
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
	b.WriteString(determinismMarkdown(r.Deterministic))
	b.WriteString(traceMarkdown(r.Trace))
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

// endpointKey names an endpoint in target names.
func endpointKey(path string) string {
	if path == pathChat {
		return "chat"
	}
	return "execute"
}

// serviceMarkdown renders row 2: the ratios against go-judge first, then every row's own numbers.
func serviceMarkdown(b *strings.Builder, s *ServiceResult) {
	fmt.Fprintf(b, "### 2. Service end to end (closed-loop keep-alive client, %d interleaved rounds of %.0f s per row)\n\n", s.Rounds, s.RowSeconds)
	if s.Peer == "" {
		fmt.Fprintf(b, "No peer row: %s.\n\n", s.PeerSkip)
	} else {
		fmt.Fprintf(b, "codellm over %s (fresh sandbox per block vs pre-forked, reused containers). Latency and CPU: ≤ 1 is codellm ahead; req/s: ≥ 1 is codellm ahead.\n\n", s.Peer)
		b.WriteString("| codellm endpoint | program | p50 c=1 | req/s c=4 | p50 c=4 | CPU/req c=1 | CPU-bound req/s c=4 |\n|---|---|---:|---:|---:|---:|---:|\n")
		for _, q := range s.Ratios {
			fmt.Fprintf(b, "| `%s` | %s | %.2f | %.2f | %.2f | %.2f | %.2f |\n", q.Endpoint, q.Lang, q.C1P50, q.C4RPS, q.C4P50, q.C1CPU, q.CPUBoundC4)
		}
		b.WriteString("\n")
	}
	b.WriteString("| system | endpoint | program | concurrency | requests | req/s | p50 ms | p99 ms | CPU ms/req | CPU-bound req/s | machine CPU ms/req |\n|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, l := range s.Rows {
		fmt.Fprintf(b, "| %s | `%s` | %s | %d | %d | %.1f | %.3f | %.3f | %.2f | %.0f | %.2f |\n", l.System, l.Endpoint, l.Lang, l.Concurrency, l.Requests, l.RPS, l.P50, l.P99, l.ServerCPU, l.CPUBoundRPS, l.MachineCPU)
	}
	fmt.Fprintf(b, "\ncodellm serve peak RSS (VmHWM, after the c=%d row): %.1f MiB.", s.RSSConc, s.RSSMiB)
	if s.PeerRSSMiB > 0 {
		fmt.Fprintf(b, " go-judge: %.1f MiB.", s.PeerRSSMiB)
	}
	b.WriteString(" CPU ms/req is the server's whole process tree (sandboxed programs and container processes included) per request;" +
		" machine CPU ms/req is every core's busy time per request during the row and until the machine is quiet after it (kernel workers, the load generator and any other load included).\n\n")
}

func orDash(f float64) string {
	if f == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", f)
}
