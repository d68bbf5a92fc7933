package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/codellm/codellm/internal/interp"
	"github.com/codellm/codellm/internal/pipeline"
)

// PipelineResult is row 3: bytes moved through three `cat` blocks versus a shell pipeline.
type PipelineResult struct {
	Bytes      int64   `json:"bytes"`
	Reps       int     `json:"reps"`
	CodellmMiB float64 `json:"codellm_mib_s"`
	BashMiB    float64 `json:"bash_mib_s"`
	Ratio      float64 `json:"ratio"`
	// OffMiB is the same pipeline with the sandbox off (plain processes, same pipes and machinery): it
	// separates the cost of the pipeline code from the cost of the confinement.
	OffMiB   float64 `json:"off_mib_s,omitempty"`
	OffRatio float64 `json:"off_ratio,omitempty"`
	// CPU seconds of each side's best rep (user+sys of every block / of bash and its children), and
	// bash's over codellm's: the share of the gap that is work rather than waiting for a core.
	CodellmCPU float64 `json:"codellm_cpu_s"`
	OffCPU     float64 `json:"off_cpu_s,omitempty"`
	BashCPU    float64 `json:"bash_cpu_s"`
	CPURatio   float64 `json:"cpu_ratio"`
}

// measurePipeline moves n bytes from a generator block through three `cat` blocks into a counting block,
// against `bash -c 'head -c n /dev/zero | cat | cat | cat | wc -c'`. Generating and counting inside the
// pipeline keeps Go's own buffers out of both sides: what is compared is the edges between blocks.
// Each side's best rep is reported (the least disturbed by other load); the sides alternate per rep.
// off, when non-nil, is a Config whose sandbox is in mode off, measured as a third side.
func measurePipeline(cfg pipeline.Config, off *pipeline.Config, n int64, reps int, logf func(string, ...any)) (*PipelineResult, error) {
	bash, err := interp.LookPath("bash")
	if err != nil {
		return nil, fmt.Errorf("pipeline: %w", err)
	}
	step := func(code string) pipeline.Step {
		return pipeline.Step{Lang: "bash", Program: "bash", Path: bash, Args: []string{"bash"}, Ext: ".sh", Code: code}
	}
	gen := fmt.Sprintf("exec head -c %d /dev/zero", n)
	steps := []pipeline.Step{step(gen), step("exec cat"), step("exec cat"), step("exec cat"), step("exec wc -c")}
	want := strconv.FormatInt(n, 10)

	type side struct {
		name      string
		run       func() (cpu time.Duration, err error)
		best, cpu time.Duration
	}
	viaPipeline := func(name string, c pipeline.Config) func() (time.Duration, error) {
		return func() (time.Duration, error) {
			res := pipeline.Run(context.Background(), c, pipeline.Request{Steps: steps, Timeout: 5 * time.Minute})
			if res.Err != nil {
				return 0, fmt.Errorf("pipeline: %s: %v", name, res.Err)
			}
			if got := strings.TrimSpace(string(res.Stdout)); got != want {
				return 0, fmt.Errorf("pipeline: %s moved %s bytes, want %s", name, got, want)
			}
			var cpu time.Duration
			for _, b := range res.Blocks {
				cpu += b.CPU
			}
			return cpu, nil
		}
	}
	sides := []*side{{name: "codellm", run: viaPipeline("codellm", cfg)}, {name: "bash", run: func() (time.Duration, error) {
		cmd := exec.Command(bash, "-c", gen+" | cat | cat | cat | wc -c")
		cmd.Env = pipeline.DefaultEnv(os.TempDir())
		out, err := cmd.Output()
		if err != nil {
			return 0, fmt.Errorf("pipeline: bash: %w", err)
		}
		if got := string(bytes.TrimSpace(out)); got != want {
			return 0, fmt.Errorf("pipeline: bash moved %s bytes, want %s", got, want)
		}
		return cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), nil
	}}}
	if off != nil {
		sides = append(sides, &side{name: "off", run: viaPipeline("sandbox off", *off)})
	}
	for i := range reps {
		var line []string
		for _, sd := range sides {
			t0 := time.Now()
			cpu, err := sd.run()
			d := time.Since(t0)
			if err != nil {
				return nil, err
			}
			if i == 0 || d < sd.best {
				sd.best, sd.cpu = d, cpu
			}
			line = append(line, fmt.Sprintf("%s %v", sd.name, d.Round(time.Millisecond)))
		}
		logf("pipeline: rep %d/%d %s", i+1, reps, strings.Join(line, ", "))
	}
	mib := float64(n) / (1 << 20)
	r := &PipelineResult{Bytes: n, Reps: reps,
		CodellmMiB: round3(mib / sides[0].best.Seconds()), BashMiB: round3(mib / sides[1].best.Seconds()),
		CodellmCPU: round3(sides[0].cpu.Seconds()), BashCPU: round3(sides[1].cpu.Seconds())}
	r.Ratio = ratio(r.CodellmMiB, r.BashMiB)
	r.CPURatio = ratio(r.BashCPU, r.CodellmCPU)
	if off != nil {
		r.OffMiB, r.OffCPU = round3(mib/sides[2].best.Seconds()), round3(sides[2].cpu.Seconds())
		r.OffRatio = ratio(r.OffMiB, r.BashMiB)
	}
	return r, nil
}
