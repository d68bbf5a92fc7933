package sandbox

import (
	"os"
	"slices"
	"testing"
	"time"
)

// BenchmarkOverlayVsBinds measures what the overlay mechanism (host
// directories as read-only overlays, issue 14 item 7) costs a block against
// plain binds: the full native sandbox as a root server runs it (the
// spawner's overlays, made once), the same with overlays mounted by each
// block (what a non-root server does) and without the mechanism (binds),
// alternating every round so that a shared host's load drifts through all
// alike. It reports each side's median wall time and mean child CPU
// (helper + program), the number to compare on a loaded machine.
//
//	go test -run '^$' -bench OverlayVsBinds -benchtime 100x ./internal/sandbox/
func BenchmarkOverlayVsBinds(b *testing.B) {
	native := sandboxFor(b, ModeNative, false)
	if !native.Report().Ready || !native.plat.avail.has(mOverlay) {
		skipOrFail(b, "native sandbox with overlays unavailable: %v", native.Report().Missing)
	}
	perBlock := withOwnSpawner(b, native)
	binds := withOwnSpawner(b, withDisabled(native, MechOverlay))
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer null.Close()
	for _, argv := range [][]string{{"/bin/true"}, {"/usr/bin/python3", "-c", "pass"}} {
		b.Run(argv[0], func(b *testing.B) {
			var wall [3][]time.Duration
			var cpu [3]time.Duration
			dir := workdir(b, nil)
			for b.Loop() {
				for k, sb := range []*Sandbox{native, perBlock, binds} {
					r, err := sb.NewRun(nil)
					if err != nil {
						b.Fatal(err)
					}
					t0 := time.Now()
					p, err := r.Start(Spec{Path: argv[0], Args: argv, Dir: dir, Env: stdEnv(dir), Stdout: null, Stderr: null})
					if err != nil {
						b.Fatal(err)
					}
					res := p.Wait()
					wall[k] = append(wall[k], time.Since(t0))
					cpu[k] += res.CPU
					r.Close()
					if res.ExitCode != 0 {
						b.Fatalf("%v: %+v", argv, res)
					}
				}
			}
			for k, name := range []string{"spawner-overlay", "block-overlay", "binds"} {
				slices.Sort(wall[k])
				b.ReportMetric(float64(wall[k][len(wall[k])/2].Nanoseconds()), name+"-p50-ns/op")
				b.ReportMetric(float64(cpu[k].Nanoseconds())/float64(len(wall[k])), name+"-cpu-ns/op")
			}
		})
	}
}

// withOwnSpawner is s with a spawner of its own that overlays nothing in
// place, so its blocks mount their own overlays (or binds), still cloned
// by a spawner like s's.
func withOwnSpawner(tb testing.TB, s *Sandbox) *Sandbox {
	c := &Sandbox{cfg: s.cfg, log: s.log, report: s.report, plat: s.plat}
	c.plat.spawner = &helperSpawner{}
	tb.Cleanup(c.plat.spawner.close)
	return c
}
