package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/codellm/codellm/internal/interp"
	"github.com/codellm/codellm/internal/pipeline"
	"github.com/codellm/codellm/internal/sandbox"
)

// DeterminismResult is the deterministic row (issue 21) for one interpreter: a one-block run of a
// program that reads the clock and the OS's randomness, with deterministic mode off and on, interleaved.
type DeterminismResult struct {
	Program    string  `json:"program"`
	Runs       int     `json:"runs"`
	OffP50     float64 `json:"off_p50_ms"`
	OnP50      float64 `json:"on_p50_ms"`
	OffP99     float64 `json:"off_p99_ms"`
	OnP99      float64 `json:"on_p99_ms"`
	OverheadMs float64 `json:"overhead_ms"`
}

// measureDeterminism runs each program's body as one pipeline block, alternating mode off and on (the
// on runs pay the time namespace, the seeded /dev/urandom file (hook.RandomBytes of ChaCha20), a second
// seccomp filter and libfaketime's preload).
func measureDeterminism(cfg pipeline.Config, runs int) ([]*DeterminismResult, error) {
	if missing := cfg.Sandbox.DeterminismMissing(); missing != "" {
		return nil, fmt.Errorf("deterministic mode unavailable: needs %s", missing)
	}
	var out []*DeterminismResult
	for _, in := range []struct{ prog, ext, code string }{
		{"python3", ".py", "import random, time\nprint(time.time(), random.random())"},
		{"node", ".js", "console.log(Date.now(), Math.random())"},
	} {
		path, err := interp.LookPath(in.prog)
		if err != nil {
			continue
		}
		step := pipeline.Step{Lang: in.prog, Program: in.prog, Path: path, Args: []string{in.prog}, Ext: in.ext, Code: in.code}
		det := &sandbox.Determinism{Seed: "bench", Now: sandbox.DefaultNow}
		var off, on sample
		var first string
		for i := -3; i < runs; i++ { // three unmeasured warm-up rounds
			for _, d := range []*sandbox.Determinism{nil, det} {
				t0 := time.Now()
				res := pipeline.Run(context.Background(), cfg, pipeline.Request{Steps: []pipeline.Step{step}, Timeout: time.Minute, Deterministic: d})
				dt := time.Since(t0)
				if res.Err != nil {
					return nil, fmt.Errorf("%s deterministic=%v: %v", in.prog, d != nil, res.Err)
				}
				if d != nil { // the row is only honest if the mode works: every run prints the same line
					if first == "" {
						first = string(res.Stdout)
					} else if string(res.Stdout) != first {
						return nil, fmt.Errorf("%s: deterministic runs differ: %q vs %q", in.prog, first, res.Stdout)
					}
				}
				if i >= 0 {
					if d == nil {
						off = append(off, dt)
					} else {
						on = append(on, dt)
					}
				}
			}
		}
		r := &DeterminismResult{Program: in.prog, Runs: runs, OffP50: ms(off.p50()), OnP50: ms(on.p50()), OffP99: ms(off.p99()), OnP99: ms(on.p99())}
		r.OverheadMs = round3(r.OnP50 - r.OffP50)
		out = append(out, r)
	}
	return out, nil
}

// determinismMarkdown is the row's section of the report.
func determinismMarkdown(rs []*DeterminismResult) string {
	if len(rs) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("### 5. Deterministic mode (one-block pipeline printing clock and random; off vs on, interleaved)\n\n")
	b.WriteString("| interpreter | runs | off p50 ms | on p50 ms | off p99 ms | on p99 ms | overhead ms |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "| %s | %d | %.3f | %.3f | %.3f | %.3f | %.3f |\n", r.Program, r.Runs, r.OffP50, r.OnP50, r.OffP99, r.OnP99, r.OverheadMs)
	}
	b.WriteString("\n")
	return b.String()
}
