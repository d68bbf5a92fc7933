package debugger_test

import (
	"context"
	"strings"
	"testing"

	"github.com/codellm/codellm/internal/debugger"
	"github.com/codellm/codellm/internal/engine"
	"github.com/codellm/codellm/internal/markdown"
)

// BenchmarkListBlocks: extraction and per-block classification of a 64-block body (no execution).
func BenchmarkListBlocks(b *testing.B) {
	eng := newEngine(b, envOpts{})
	body := strings.Repeat("prose line\n"+block("bash", "echo hi\ncat\n")+block("kotlin", "x"), 32)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := debugger.ListBlocks(eng, body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRunBlock: one bash block run alone in the production sandbox (the run-block path).
func BenchmarkRunBlock(b *testing.B) {
	eng := newEngine(b, envOpts{})
	body := block("bash", "cat")
	for b.Loop() {
		r, err := debugger.RunBlock(context.Background(), eng, body, 0, []byte("ping"), nil)
		if err != nil || !r.OK {
			b.Fatalf("%v %+v", err, r)
		}
	}
}

// BenchmarkSteppedVsPipeline compares a three-block body stepped (three separate sandboxed runs) with the
// same body as one streaming pipeline: the debugger's cost of keeping every edge addressable.
func BenchmarkSteppedVsPipeline(b *testing.B) {
	eng := newEngine(b, envOpts{})
	body := block("bash", `printf 'abc\ndef\n'`) + block("bash", "tr a-z A-Z") + block("bash", `printf '{"answer":"%s"}' "$(wc -c)"`)
	b.Run("stepped", func(b *testing.B) {
		for b.Loop() {
			s, err := debugger.NewSession(eng, body, nil)
			if err != nil {
				b.Fatal(err)
			}
			for i := 0; i < 3; i++ {
				if r, err := s.Step(context.Background(), nil); err != nil || !r.Run.OK {
					b.Fatalf("%v %+v", err, r)
				}
			}
			s.Close()
		}
	})
	b.Run("pipeline", func(b *testing.B) {
		for b.Loop() {
			resolved, err := eng.Plan([]markdown.Source{{Text: body}})
			if err != nil {
				b.Fatal(err)
			}
			res, _, err := eng.Run(context.Background(), engine.RunRequest{Resolved: resolved, Tap: true})
			if err != nil || res.Err != nil {
				b.Fatalf("%v %v", err, res.Err)
			}
		}
	})
}
