//go:build linux && (amd64 || arm64)

package rawchild

import (
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ballast is memory of the test's own, written, that a child would share.
var ballast []byte

// Differential: an init that keeps its copy of the caller's memory holds the
// caller's written anonymous pages (here a 32 MiB ballast) for as long as
// its program runs; by default it lets go of them once the program runs.
func TestInitLetsGoOfTheCallersMemory(t *testing.T) {
	ballast = make([]byte, 32<<20)
	for i := range ballast {
		ballast[i] = 1
	}
	for _, keep := range []bool{true, false} {
		p := &Prog{}
		inR, inW := pipe(t)
		c := startAttr(t, p, sh("echo up; read x"), Attr{Stdin: inR, KeepShared: keep})
		inR.Close()
		up := make([]byte, 3)
		if _, err := io.ReadFull(c.stdout, up); err != nil {
			t.Fatal(err)
		}
		rss := rssAnonKiB(t, c.pid)
		// The init lets go right after it reports Started, which may come after the program's "up".
		for deadline := time.Now().Add(2 * time.Second); !keep && rss > 8<<10 && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
			rss = rssAnonKiB(t, c.pid)
		}
		inW.Close()
		c.records(t)
		c.wait(t)
		if keep && rss < 32<<10 {
			t.Errorf("KeepShared: the init holds %d KiB of anonymous memory, want the 32 MiB ballast (the test shows nothing)", rss)
		}
		if !keep && rss > 8<<10 {
			t.Errorf("the init holds %d KiB of anonymous memory while its program runs, want it to have let go of the caller's", rss)
		}
	}
	ballast = nil
}

// Differential: a child that keeps the caller's memory has the ballast
// mapped, and the caller's first write to each of its pages afterwards is a
// copy-on-write fault; by default the fork never gives the child those
// pages (MADV_DONTFORK around the clone), so the caller writes its own
// memory without faulting.
func TestForkLeavesTheCallersHeapOut(t *testing.T) {
	runtime.LockOSThread() // RUSAGE_THREAD: this thread's faults only
	defer runtime.UnlockOSThread()
	ballast = make([]byte, 16<<20)
	// Small pages, so that a copy-on-write fault is one per 4 KiB even where
	// transparent huge pages are on.
	_ = unix.Madvise(ballast, unix.MADV_NOHUGEPAGE)
	for i := range ballast {
		ballast[i] = 1
	}
	mid := uintptr(unsafe.Pointer(&ballast[len(ballast)/2]))
	anonMaps.Lock()
	anonMaps.ranges = nil // the ballast may be in memory mapped after the list was read
	anonMaps.Unlock()
	for _, keep := range []bool{true, false} {
		p := &Prog{}
		inR, inW := pipe(t)
		c := startAttr(t, p, sh("echo up; read x"), Attr{Stdin: inR, KeepShared: keep})
		inR.Close()
		mapped := mapsCover(t, c.pid, mid)
		var before, after unix.Rusage
		_ = unix.Getrusage(unix.RUSAGE_THREAD, &before)
		for i := 0; i < len(ballast); i += 4096 {
			ballast[i]++
		}
		_ = unix.Getrusage(unix.RUSAGE_THREAD, &after)
		faults := after.Minflt - before.Minflt
		inW.Close()
		c.records(t)
		c.wait(t)
		pages := int64(len(ballast) / 4096)
		if keep && (!mapped || faults < pages/2) {
			t.Errorf("KeepShared: ballast mapped in the child %v, the caller's writes faulted %d times for %d pages, want mapped and about one fault a page (the test shows nothing)", mapped, faults, pages)
		}
		if !keep && (mapped || faults > pages/16) {
			t.Errorf("ballast mapped in the child %v, the caller's writes faulted %d times for %d pages: want it left out of the fork and no copy-on-write", mapped, faults, pages)
		}
	}
	ballast = nil
}

// mapsCover reports whether pid has a mapping covering addr.
func mapsCover(t *testing.T, pid int, addr uintptr) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/maps")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		lo, rest, ok := strings.Cut(l, "-")
		if !ok {
			continue
		}
		hi, _, _ := strings.Cut(rest, " ")
		s, err1 := strconv.ParseUint(lo, 16, 64)
		e, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 == nil && err2 == nil && uintptr(s) <= addr && addr < uintptr(e) {
			return true
		}
	}
	return false
}

func rssAnonKiB(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "RssAnon:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	t.Fatal("no RssAnon")
	return 0
}
