//go:build linux

package egress

import (
	"os"
	"testing"

	"github.com/codellm/codellm/internal/sandbox"
)

// BenchmarkBlockStart measures what the egress plumbing (lo up, the listener, SCM_RIGHTS, the Landlock
// port rule, the per-run session) adds to starting and reaping a block:
//
//	go test -run XXX -bench BlockStart -benchtime 50x ./internal/egress
func BenchmarkBlockStart(b *testing.B) {
	pol, _ := Parse([]string{"allowed.test"})
	p, _ := New(Config{Policy: pol})
	for _, bc := range []struct {
		name string
		cfg  sandbox.Config
	}{
		{"no-network", sandbox.Config{Mode: sandbox.ModeNative}},
		{"egress", sandbox.Config{Mode: sandbox.ModeNative, Egress: func(id string, n []string) (sandbox.EgressRun, error) {
			s, err := p.Open(id, n)
			if err != nil {
				return nil, err
			}
			return s, nil
		}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			sb, err := sandbox.New(bc.cfg)
			if err != nil || !sb.Report().Ready {
				b.Skipf("native sandbox unavailable: %v", err)
			}
			null, _ := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
			defer null.Close()
			dir := b.TempDir()
			b.ResetTimer()
			for range b.N {
				r, err := sb.NewRun(nil)
				if err != nil {
					b.Fatal(err)
				}
				pr, err := r.Start(sandbox.Spec{Path: "/bin/true", Args: []string{"true"}, Dir: dir, Stdout: null, Stderr: null})
				if err != nil {
					b.Fatal(err)
				}
				pr.Wait()
				_ = r.Close()
			}
		})
	}
}
