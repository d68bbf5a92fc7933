package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/codellm/codellm/internal/interp"
	"github.com/codellm/codellm/internal/pipeline"
)

// InterpResult is row 4 for one interpreter: a one-block run of an empty program versus the bare
// interpreter running the same program.
type InterpResult struct {
	Runs       int     `json:"runs"`
	BareP50    float64 `json:"bare_p50_ms"`
	BareP99    float64 `json:"bare_p99_ms"`
	CodellmP50 float64 `json:"codellm_p50_ms"`
	CodellmP99 float64 `json:"codellm_p99_ms"`
	OverheadMs float64 `json:"overhead_ms"`
	Ratio      float64 `json:"ratio"`
}

// measureInterp runs `prog flag code` bare and the same code as one pipeline block (workdir, input.json,
// pipes, capture, sandbox, cleanup: everything a one-block request pays below HTTP), interleaved.
func measureInterp(cfg pipeline.Config, prog, flag, code, ext string, runs int) (*InterpResult, error) {
	path, err := interp.LookPath(prog)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "codellm-bench-interp-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	step := pipeline.Step{Lang: prog, Program: prog, Path: path, Args: []string{prog}, Ext: ext, Code: code}
	var bare, cl sample
	for i := -3; i < runs; i++ { // three unmeasured warm-up rounds
		t0 := time.Now()
		cmd := exec.Command(path, flag, code)
		cmd.Dir, cmd.Env = dir, pipeline.DefaultEnv(dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("%s bare: %v: %s", prog, err, out)
		}
		db := time.Since(t0)
		t0 = time.Now()
		res := pipeline.Run(context.Background(), cfg, pipeline.Request{Steps: []pipeline.Step{step}, Timeout: time.Minute})
		dc := time.Since(t0)
		if res.Err != nil {
			return nil, fmt.Errorf("%s codellm: %v", prog, res.Err)
		}
		if i >= 0 {
			bare, cl = append(bare, db), append(cl, dc)
		}
	}
	r := &InterpResult{Runs: runs, BareP50: ms(bare.p50()), BareP99: ms(bare.p99()),
		CodellmP50: ms(cl.p50()), CodellmP99: ms(cl.p99())}
	r.OverheadMs = round3(r.CodellmP50 - r.BareP50)
	r.Ratio = ratio(r.CodellmP50, r.BareP50)
	return r, nil
}
