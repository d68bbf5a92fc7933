package pipeline

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/sandbox"
)

const benchBytes = 64 << 20

// benchModes runs the benchmark per sandbox mode available on the host.
func benchModes(b *testing.B, f func(b *testing.B, cfg Config)) {
	for _, mode := range []sandbox.Mode{sandbox.ModeOff, sandbox.ModeNative} {
		b.Run(string(mode), func(b *testing.B) {
			sb, err := sandbox.New(sandbox.Config{Mode: mode})
			if err != nil {
				b.Skipf("sandbox mode %s unavailable: %v", mode, err)
			}
			b.Cleanup(func() { sb.Close() })
			f(b, Config{Sandbox: sb, WorkRoot: b.TempDir(), MaxOutputBytes: benchBytes})
		})
	}
}

// BenchmarkPipelineCat streams 64 MiB through three `cat` blocks; compare its MB/s with
// BenchmarkShellCat (the same bytes through `bash -c 'cat|cat|cat'`). Both feed stdin from and capture
// stdout into Go memory, so the difference is the pipeline's own cost (target: ≥ 0.7× the shell).
func BenchmarkPipelineCat(b *testing.B) {
	bash := lookProgram("bash")
	if bash == "" {
		b.Skip("bash not installed")
	}
	in := bytes.Repeat([]byte("0123456789abcdef"), benchBytes/16)
	cat := Step{Lang: "bash", Program: "bash", Path: bash, Args: []string{"bash"}, Ext: ".sh", Code: "exec cat"}
	benchModes(b, func(b *testing.B, cfg Config) {
		b.SetBytes(benchBytes)
		for b.Loop() {
			res := Run(context.Background(), cfg, Request{Steps: []Step{cat, cat, cat}, Stdin: in, Timeout: time.Minute})
			if res.Err != nil || len(res.Stdout) != benchBytes {
				b.Fatalf("err %v, %d bytes", res.Err, len(res.Stdout))
			}
		}
	})
}

// BenchmarkShellCat is the baseline for BenchmarkPipelineCat.
func BenchmarkShellCat(b *testing.B) {
	bash := lookProgram("bash")
	if bash == "" {
		b.Skip("bash not installed")
	}
	in := bytes.Repeat([]byte("0123456789abcdef"), benchBytes/16)
	b.SetBytes(benchBytes)
	for b.Loop() {
		var out bytes.Buffer
		out.Grow(benchBytes)
		cmd := exec.Command(bash, "-c", "cat|cat|cat")
		cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(in), &out, os.Stderr
		if err := cmd.Run(); err != nil || out.Len() != benchBytes {
			b.Fatalf("err %v, %d bytes", err, out.Len())
		}
	}
}

// BenchmarkRunTrue is the fixed cost of a one-block run: workdir, pipes, sandbox start, reap, cleanup.
func BenchmarkRunTrue(b *testing.B) {
	tru := lookProgram("true")
	if tru == "" {
		b.Skip("true not installed")
	}
	step := Step{Lang: "true", Program: "true", Path: tru, Args: []string{"true"}, Ext: ".txt"}
	benchModes(b, func(b *testing.B, cfg Config) {
		for b.Loop() {
			if res := Run(context.Background(), cfg, Request{Steps: []Step{step}, Timeout: time.Minute}); res.Err != nil {
				b.Fatal(res.Err)
			}
		}
	})
}

// BenchmarkTappedCat is BenchmarkPipelineCat with every edge tapped (debug requests): the copiers are the
// extra cost.
func BenchmarkTappedCat(b *testing.B) {
	bash := lookProgram("bash")
	if bash == "" {
		b.Skip("bash not installed")
	}
	in := bytes.Repeat([]byte("0123456789abcdef"), benchBytes/16)
	cat := Step{Lang: "bash", Program: "bash", Path: bash, Args: []string{"bash"}, Ext: ".sh", Code: "exec cat"}
	benchModes(b, func(b *testing.B, cfg Config) {
		b.SetBytes(benchBytes)
		for b.Loop() {
			res := Run(context.Background(), cfg, Request{Steps: []Step{cat, cat, cat}, Stdin: in, Tap: true, Timeout: time.Minute})
			if res.Err != nil || len(res.Stdout) != benchBytes {
				b.Fatalf("err %v, %d bytes", res.Err, len(res.Stdout))
			}
		}
	})
}

// edgeBytes is large enough that the fixed cost of a run (workdirs, sandbox starts) does not dominate.
const edgeBytes = 256 << 20

// BenchmarkPipelineEdges is BenchmarkPipelineCat with the last block discarding its input, against
// BenchmarkShellEdges: it measures the edges between blocks (plain OS pipes) without the capture of a
// large stdout, which production caps at 1 MiB anyway.
func BenchmarkPipelineEdges(b *testing.B) {
	bash := lookProgram("bash")
	if bash == "" {
		b.Skip("bash not installed")
	}
	in := bytes.Repeat([]byte("0123456789abcdef"), edgeBytes/16)
	cat := Step{Lang: "bash", Program: "bash", Path: bash, Args: []string{"bash"}, Ext: ".sh", Code: "exec cat"}
	sink := cat
	sink.Code = "exec cat >/dev/null"
	benchModes(b, func(b *testing.B, cfg Config) {
		b.SetBytes(edgeBytes)
		for b.Loop() {
			res := Run(context.Background(), cfg, Request{Steps: []Step{cat, cat, sink}, Stdin: in, Timeout: time.Minute})
			if res.Err != nil {
				b.Fatal(res.Err)
			}
		}
	})
}

// BenchmarkShellEdges is the baseline for BenchmarkPipelineEdges.
func BenchmarkShellEdges(b *testing.B) {
	bash := lookProgram("bash")
	if bash == "" {
		b.Skip("bash not installed")
	}
	in := bytes.Repeat([]byte("0123456789abcdef"), edgeBytes/16)
	b.SetBytes(edgeBytes)
	for b.Loop() {
		cmd := exec.Command(bash, "-c", "cat|cat|cat >/dev/null")
		cmd.Stdin, cmd.Stderr = bytes.NewReader(in), os.Stderr
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkShellInBlock runs `cat|cat|cat >/dev/null` as ONE block: the shell's own pipeline inside the
// same sandbox, cgroup and stdin feed as BenchmarkPipelineEdges. The ratio of the two is the cost of the
// pipeline's edges alone; the ratio to BenchmarkShellEdges adds what the sandbox costs.
func BenchmarkShellInBlock(b *testing.B) {
	bash := lookProgram("bash")
	if bash == "" {
		b.Skip("bash not installed")
	}
	in := bytes.Repeat([]byte("0123456789abcdef"), edgeBytes/16)
	shell := Step{Lang: "bash", Program: "bash", Path: bash, Args: []string{"bash"}, Ext: ".sh", Code: "cat|cat|cat >/dev/null"}
	benchModes(b, func(b *testing.B, cfg Config) {
		b.SetBytes(edgeBytes)
		for b.Loop() {
			if res := Run(context.Background(), cfg, Request{Steps: []Step{shell}, Stdin: in, Timeout: time.Minute}); res.Err != nil {
				b.Fatal(res.Err)
			}
		}
	})
}
