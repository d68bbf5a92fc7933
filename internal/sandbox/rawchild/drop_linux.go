//go:build linux && (amd64 || arm64)

package rawchild

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A raw child is a copy of its parent and, unlike a child that execs, keeps
// sharing the parent's anonymous pages copy-on-write for its whole life: for
// the spawner, every page it writes while a block runs is a fault, a page
// copy and a TLB shootdown (internal/sandbox/PERF.md, "session 10"). Once the
// program runs, the init needs only its frame and its stack, so it lets go
// of every other private anonymous page (MADV_DONTNEED): the parent's pages
// are then its own again, and a write to one only re-enables it.

// maxDrop bounds the ranges a child lets go of at once.
const maxDrop = 64

type memRange struct{ start, end uintptr }

// anonMaps caches the caller's private anonymous writable mappings (the Go
// heap and the runtime's own): they change rarely, and reading them per fork
// would itself write pages. A stale list only leaves some pages shared.
var anonMaps struct {
	sync.Mutex
	at     time.Time
	ranges []memRange
}

// anonRanges lists the caller's private anonymous writable mappings,
// refreshed at most once a second.
func anonRanges() []memRange {
	anonMaps.Lock()
	defer anonMaps.Unlock()
	if time.Since(anonMaps.at) < time.Second && anonMaps.ranges != nil {
		return anonMaps.ranges
	}
	anonMaps.ranges, anonMaps.at = readAnonMaps(), time.Now()
	return anonMaps.ranges
}

func readAnonMaps() []memRange {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return []memRange{}
	}
	rs := []memRange{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// start-end perms offset dev inode [path]
		f := bytes.Fields(sc.Bytes())
		// Not the main thread's [stack] either: it holds the argv that
		// /proc/PID/cmdline shows (ps names a helper by it).
		if len(f) < 5 || string(f[1]) != "rw-p" || string(f[4]) != "0" || len(f) > 5 {
			continue // file-backed, shared, read-only, or named ([stack], [heap], [vvar])
		}
		lo, hi, ok := bytes.Cut(f[0], []byte("-"))
		if !ok {
			continue
		}
		s, err1 := strconv.ParseUint(string(lo), 16, 64)
		e, err2 := strconv.ParseUint(string(hi), 16, 64)
		if err1 == nil && err2 == nil && e > s {
			rs = append(rs, memRange{uintptr(s), uintptr(e)})
		}
	}
	return rs
}

// planDrop plans what the child lets go of (dropShared): before its steps,
// every anonymous range of the caller's but f itself and p's memory (the
// steps read it); once the program runs, p's memory too. The stack the child
// runs on is spared by the child: the goroutine's stack may still move
// before the fork.
func planDrop(f *frame, p *Prog) {
	self := span(unsafe.Pointer(f), unsafe.Sizeof(*f))
	var prog []memRange
	if cap(p.ops) > 0 {
		prog = append(prog, span(unsafe.Pointer(&p.ops[:1][0]), uintptr(cap(p.ops))*unsafe.Sizeof(op{})))
	}
	for _, c := range p.chunks {
		prog = append(prog, span(unsafe.Pointer(&c[0]), uintptr(len(c))))
	}
	f.ndrop, f.pageMask = planRanges(&f.drop, subtractAll(anonRanges(), append(prog, self)))
	f.nlater, _ = planRanges(&f.later, subtractAll(prog, []memRange{self}))
}

// span is the pages that hold n bytes at at.
func span(at unsafe.Pointer, n uintptr) memRange {
	page := uintptr(syscall.Getpagesize())
	a := uintptr(at)
	return memRange{a &^ (page - 1), (a + n + page - 1) &^ (page - 1)}
}

// subtractAll is rs without keep.
func subtractAll(rs, keep []memRange) []memRange {
	var out []memRange
	for _, r := range rs {
		out = append(out, subtract(r, keep)...)
	}
	return out
}

// planRanges copies rs into dst (at most maxDrop) and returns how many, and
// the page mask the child aligns its stack window with.
func planRanges(dst *[maxDrop]memRange, rs []memRange) (n, pageMask uintptr) {
	n = uintptr(copy(dst[:], rs))
	return n, uintptr(syscall.Getpagesize()) - 1
}

// subtract returns r without the ranges in keep.
func subtract(r memRange, keep []memRange) []memRange {
	out := []memRange{r}
	for _, k := range keep {
		var next []memRange
		for _, p := range out {
			if k.end <= p.start || k.start >= p.end {
				next = append(next, p)
				continue
			}
			if p.start < k.start {
				next = append(next, memRange{p.start, k.start})
			}
			if k.end < p.end {
				next = append(next, memRange{k.end, p.end})
			}
		}
		out = next
	}
	return out
}

// stackWindow is how much around its stack pointer the init keeps: its own
// calls from here on take well under a page (nosplit code).
const stackWindow = 64 << 10

// dropShared lets go of the ranges rs[:n] but the stack it runs on and
// the thread's TLS (tp, see adviseOutside). Nothing of the runtime runs in
// the child, and nothing in them is read again: the child's code uses only
// its frame, its stack and, until the program runs, the Prog's memory.
//
//go:nosplit
//go:norace
//go:nocheckptr
func dropShared(rs *[maxDrop]memRange, n, pageMask, tp uintptr) {
	_ = adviseOutside(rs, n, pageMask, tp, syscall.MADV_DONTNEED, stackWindow, stackWindow)
}

// adviseOutside applies madvise(advice) to the ranges rs[:n] but two
// windows: the stack from below bytes under the caller's stack pointer to
// above bytes over it, and tpWindow around tp, the thread pointer (0:
// none). A child without its TLS dies of SIGSEGV at its first return
// through an ABI wrapper, or (cgo) before its first instruction, since the
// kernel writes the thread's rseq area on every return to user space.
//
//go:nosplit
//go:norace
//go:nocheckptr
func adviseOutside(rs *[maxDrop]memRange, n, pageMask, tp, advice, below, above uintptr) (ok bool) {
	var here byte
	sp := uintptr(unsafe.Pointer(&here))
	w := [2]memRange{{(sp - below) &^ pageMask, (sp + above + pageMask) &^ pageMask}, {}}
	w[1] = w[0]
	if tp > tpWindow {
		w[1] = memRange{(tp - tpWindow) &^ pageMask, (tp + tpWindow + pageMask) &^ pageMask}
	}
	if w[1].start < w[0].start {
		w[0], w[1] = w[1], w[0]
	}
	ok = true
	for i := uintptr(0); i < n && i < maxDrop; i++ {
		r := rs[i]
		at := r.start
		for k := 0; k < 2; k++ {
			if w[k].end <= at || w[k].start >= r.end {
				continue
			}
			if at < w[k].start {
				ok = madvise(at, w[k].start, advice) && ok
			}
			at = max(at, w[k].end)
		}
		if at < r.end {
			ok = madvise(at, r.end, advice) && ok
		}
	}
	return ok
}

// The fork itself need not copy what the child lets go of anyway: the
// parent marks those ranges MADV_DONTFORK just before its clone and
// MADV_DOFORK right after (both from the fork's own frame, so the stack
// window is the same), and the child never has them. This is what spares
// the spawner its copy-on-write faults: a fork write-protects every private
// page it copies in the parent as well, so the spawner's next write to each
// of its heap pages was a fault and a TLB flush (about 130 per block), and
// the copy of their page tables went with them. The marks live only while
// syscall.ForkLock is held (cloneWithMaps): a fork by package syscall (the
// Go helper's, a real fork with a user namespace) always copies everything.

// The window a fork keeps of its caller's stack: from forkBelow under the
// marking frame (the child's nosplit calls, which the linker bounds to well
// under a page, and the system calls') to forkAbove over it (the fork's own
// frame and its arguments' spill slots; the child never returns from it).
// The rest of the goroutine's stack span, and the heap around it, would only
// be copy-on-write pages the spawner then faults on.
const (
	forkBelow = 32 << 10
	forkAbove = 8 << 10
)

// markNoFork reports whether every range was marked: then the child has
// none of them and need not let go of them again (a failed mark, say for a
// range unmapped since the cached list was read, leaves that to its drop).
//
//go:nosplit
func markNoFork(rs *[maxDrop]memRange, n, pageMask, tp uintptr) bool {
	return adviseOutside(rs, n, pageMask, tp, syscall.MADV_DONTFORK, forkBelow, forkAbove)
}

//go:nosplit
func unmarkNoFork(rs *[maxDrop]memRange, n, pageMask, tp uintptr) {
	_ = adviseOutside(rs, n, pageMask, tp, syscall.MADV_DOFORK, forkBelow, forkAbove)
}

// markWipe gives the child the ranges rs[:n] as fresh zero pages
// (MADV_WIPEONFORK): an idle child receives its program into the Prog's
// memory, so it needs the addresses but not what the caller keeps there.
//
//go:nosplit
func markWipe(rs *[maxDrop]memRange, n, pageMask, tp uintptr) bool {
	return adviseOutside(rs, n, pageMask, tp, unix.MADV_WIPEONFORK, forkBelow, forkAbove)
}

//go:nosplit
func unmarkWipe(rs *[maxDrop]memRange, n, pageMask, tp uintptr) {
	_ = adviseOutside(rs, n, pageMask, tp, unix.MADV_KEEPONFORK, forkBelow, forkAbove)
}

// forkTP is the thread pointer a fork keeps memory around (tpWindow).
func forkTP() uintptr { return threadPointer() }

// tpWindow is how much around the thread pointer a child keeps: on amd64
// the Go runtime's TLS slot (-8 from it, read by every ABI wrapper the
// child's assembly calls return through), and with cgo the C library's
// thread control block with its rseq area (a few KiB on either side of it,
// by architecture).
const tpWindow = 8 << 10

//go:nosplit
func madvise(start, end, advice uintptr) bool {
	_, _, e := syscall.RawSyscall(syscall.SYS_MADVISE, start, end-start, advice)
	return e == 0
}
