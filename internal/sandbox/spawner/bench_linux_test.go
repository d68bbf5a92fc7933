//go:build linux

package spawner

import (
	"os"
	"syscall"
	"testing"
)

// BenchmarkClone clones a helper-shaped child (new user, PID and mount
// namespaces, uid maps) that exits at once, then writes every page of a
// 8 MiB heap (codellm serve's anonymous memory under load), as a busy server does between clones: directly from this
// process (Go forks it: page tables copied, heap write-protected, one
// copy-on-write fault per page written next) and through a spawner. The
// CPU of the whole process tree per clone is the number to compare:
//
//	go test -run '^$' -bench Clone -benchtime 300x ./internal/sandbox/spawner/
func BenchmarkClone(b *testing.B) {
	sys := userNS()
	if sys == nil {
		b.Skip("needs root for the uid map")
	}
	heap := make([]byte, 8<<20)
	null, _ := os.Open(os.DevNull)
	defer null.Close()
	files := []*os.File{null, null, null}
	b.Run("direct", func(b *testing.B) {
		measureClone(b, heap, func() (*os.Process, error) {
			return stableStart("/bin/sh", []string{"sh", "-c", "exit 0"}, &os.ProcAttr{Files: files, Sys: sys})
		})
	})
	b.Run("spawner", func(b *testing.B) {
		s := startShell(b)
		measureClone(b, heap, func() (*os.Process, error) {
			return s.Spawn([]string{"SCRIPT=exit 0"}, files, sys)
		})
	})
}

func measureClone(b *testing.B, heap []byte, clone func() (*os.Process, error)) {
	before := treeCPU()
	for b.Loop() {
		p, err := clone()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := p.Wait(); err != nil {
			b.Fatal(err)
		}
		for i := 0; i < len(heap); i += 4096 {
			heap[i]++
		}
	}
	b.ReportMetric(float64(treeCPU()-before)/float64(b.N)/1e6, "cpu-ms/op")
}

// treeCPU is this process's CPU and its reaped children's, in nanoseconds.
func treeCPU() int64 {
	var self, kids syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &self)
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids)
	ns := func(r syscall.Rusage) int64 { return r.Utime.Nano() + r.Stime.Nano() }
	return ns(self) + ns(kids)
}
