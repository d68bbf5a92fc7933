package cgroup

import (
	"testing"
)

var benchLimits = Limits{Memory: 256 << 20, Pids: 128, CPUs: 1}

// BenchmarkNewGroup measures the request hot path: creating a run group
// with memory, pids and CPU limits (removal is excluded from the timing).
func BenchmarkNewGroup(b *testing.B) {
	benchNewGroup(b, requireHost(b), benchLimits)
}

// BenchmarkNewGroupV2Core is the same on the unified hierarchy without
// controllers: the cost of the mkdir alone on v2.
func BenchmarkNewGroupV2Core(b *testing.B) {
	benchNewGroup(b, requireV2Host(b), Limits{})
}

func benchNewGroup(b *testing.B, h *Host, lim Limits) {
	gs := make([]*Group, 0, 256)
	flush := func() {
		b.StopTimer()
		for _, g := range gs {
			if err := g.Remove(); err != nil {
				b.Fatal(err)
			}
		}
		gs = gs[:0]
		b.StartTimer()
	}
	b.ResetTimer()
	for b.Loop() {
		g, err := h.NewGroup(testName(b), lim)
		if err != nil {
			b.Fatal(err)
		}
		gs = append(gs, g)
		if len(gs) == cap(gs) {
			flush()
		}
	}
	flush()
}

// BenchmarkNewGroupRemove is a full create+remove cycle of an empty run group.
func BenchmarkNewGroupRemove(b *testing.B) {
	h := requireHost(b)
	for b.Loop() {
		g, err := h.NewGroup(testName(b), benchLimits)
		if err != nil {
			b.Fatal(err)
		}
		if err := g.Remove(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNewChild measures the per-block child creation (runs of 8
// blocks; run creation and removal are excluded from the timing).
func BenchmarkNewChild(b *testing.B) {
	h := requireHost(b)
	var g *Group
	n := 0
	for b.Loop() {
		if n%8 == 0 {
			b.StopTimer()
			if g != nil {
				if err := g.Remove(); err != nil {
					b.Fatal(err)
				}
			}
			var err error
			if g, err = h.NewGroup(testName(b), benchLimits); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		n++
		if _, err := g.NewChild(testName(b)); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if err := g.Remove(); err != nil {
		b.Error(err)
	}
}

// BenchmarkStats measures reading all statistics of a run group.
func BenchmarkStats(b *testing.B) {
	h := requireHost(b)
	g, err := h.NewGroup(testName(b), benchLimits)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := g.Remove(); err != nil {
			b.Error(err)
		}
	}()
	if _, err := g.NewChild("block"); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := g.Stats(); err != nil {
			b.Fatal(err)
		}
	}
}
