//go:build linux && (amd64 || arm64)

package rawchild

import (
	"fmt"
	"syscall"
	"unsafe"
)

// maxSlots is how many results a Prog can keep for later steps (a power of
// two: the child masks slot indices with it, so it never bounds-checks).
const maxSlots = 16

// Arg is one argument of a step: a value, or the result of an earlier step.
type Arg struct {
	v    uintptr
	slot int8 // ≥ 0: the value of this slot replaces v
}

// Val is a literal argument.
func Val(v uintptr) Arg { return Arg{v: v, slot: -1} }

// Int is a literal signed argument (AT_FDCWD, -1), sign-extended as the
// kernel reads it.
func Int(v int) Arg { return Arg{v: uintptr(v), slot: -1} }

// Slot names the saved result of an earlier step.
type Slot int8

// Arg makes the slot's value an argument.
func (s Slot) Arg() Arg { return Arg{slot: int8(s)} }

// opKind is what a step is.
type opKind uint8

const (
	opCall  opKind = iota // the system call trap(arg...)
	opStore               // *(*int32)(at) = arg[1]: a saved result into a struct
	opIfOK                // skip the next skip steps when slot from[0] holds a failure (negative)
)

// op is one step, as the child reads it.
type op struct {
	kind   opKind
	trap   uintptr
	arg    [6]uintptr
	from   [6]int8        // per argument: -1, or the slot whose value replaces it
	save   int8           // the slot that receives the result, or -1
	at     unsafe.Pointer // opStore: where it writes
	skip   uintptr        // opIfOK: how many steps it skips
	okErr  uintptr        // an errno that counts as success (EEXIST for a mkdir), or 0
	want   uintptr        // with wantOK: the only result that counts as success (a write's length)
	wantOK bool
	tag    uint32  // Prog.Tag when the step was added, for its failure record
	what   *byte   // what the step does (no NUL), for its failure record
	nwhat  uintptr // its length, at most maxWhat
}

// Prog is what the child does before it starts the program: system calls
// in order, each able to use the results of earlier ones. Its memory
// (strings, structs) is kept in an arena of the Prog's, inherited by the
// child. A Prog can be Reset and built again: a caller that forks many
// children (the spawner) then allocates almost nothing per child, and
// every page it writes after a fork is one more copy-on-write fault while
// that child lives.
type Prog struct {
	ops    []op
	chunks [][]byte // the arena: never moved once handed out
	cur    int      // the chunk being filled
	used   int      // bytes used of it
	slots  int8     // slots made
	filled uint16   // slots some earlier step fills
	tag    uint32   // the tag of the steps added now (Tag)
	err    error
	fr     *frame   // the child's frame, made once (newFrame)
	dirs   []string // directories the root's steps make so far (mkdirs)
	ovTag  uint32   // the tag of a root's overlay mounts (Root.OverlayTag)
}

// chunkSize is the arena's unit; a larger request gets a chunk of its own.
const chunkSize = 32 << 10

// Reset empties p for a new program, keeping its memory. Addresses p handed
// out before are reused: a child already started has its own copy.
func (p *Prog) Reset() {
	p.ops, p.dirs = p.ops[:0], p.dirs[:0]
	p.cur, p.used, p.slots, p.filled, p.tag, p.err = 0, 0, 0, 0, 0, nil
}

// Bytes returns n zeroed bytes of p's memory (8-byte aligned) and their
// address, for the caller to fill (a struct a later Store32 writes into).
func (p *Prog) Bytes(n int) ([]byte, uintptr) {
	b := p.alloc(max(n, 1))[:n]
	return b, uintptr(unsafe.Pointer(unsafe.SliceData(b)))
}

func (p *Prog) alloc(n int) []byte {
	need := (n + 7) &^ 7
	for p.cur < len(p.chunks) && p.used+need > len(p.chunks[p.cur]) {
		p.cur, p.used = p.cur+1, 0
	}
	if p.cur == len(p.chunks) {
		p.chunks = append(p.chunks, make([]byte, max(chunkSize, need)))
	}
	b := p.chunks[p.cur][p.used : p.used+n : p.used+n]
	clear(b)
	p.used += need
	return b
}

// Tag sets the tag of the steps added from now on: a number the child puts
// in the failure record of such a step, so that whoever reads the record
// can tell what failed without the Prog (package sandbox puts the
// mechanism there: root filesystem, Landlock, seccomp). The program's exec
// has tag 0.
func (p *Prog) Tag(t uint32) { p.tag = t }

// Str returns the address of a NUL-terminated copy of s in p's memory.
func (p *Prog) Str(s string) uintptr {
	b, at := p.Bytes(len(s) + 1)
	copy(b, s)
	return at
}

// Buf returns the address of a copy of b in p's memory (one zero byte when
// b is empty).
func (p *Prog) Buf(b []byte) uintptr {
	m, at := p.Bytes(max(len(b), 1))
	copy(m, b)
	return at
}

// Call appends the system call trap(args...); its result is discarded.
func (p *Prog) Call(what string, trap uintptr, args ...Arg) {
	p.add(what, opCall, trap, args, -1)
}

// NewSlot reserves a slot for results; CallTo fills it (again and again:
// a loop over rules can reuse one slot for each descriptor).
func (p *Prog) NewSlot() Slot {
	if p.slots >= maxSlots {
		p.fail(fmt.Errorf("rawchild: more than %d slots", maxSlots))
		return 0
	}
	p.slots++
	return Slot(p.slots - 1)
}

// CallSave appends trap(args...) and returns the new slot its result goes to.
func (p *Prog) CallSave(what string, trap uintptr, args ...Arg) Slot {
	s := p.NewSlot()
	p.CallTo(what, s, trap, args...)
	return s
}

// CallTo appends trap(args...) with its result saved in s.
func (p *Prog) CallTo(what string, s Slot, trap uintptr, args ...Arg) {
	if s < 0 || int8(s) >= p.slots {
		p.fail(fmt.Errorf("rawchild: %s: slot %d was not made with NewSlot", what, s))
		return
	}
	p.add(what, opCall, trap, args, int8(s))
	if p.err == nil {
		p.filled |= 1 << uint(s)
	}
}

// IfOK runs the steps body appends only when s holds a success (not a
// negative result: a step whose errno was allowed leaves -1 there), and
// skips them otherwise: an optional path that does not exist.
func (p *Prog) IfOK(s Slot, body func()) {
	at := len(p.ops)
	p.add("if ok", opIfOK, 0, []Arg{s.Arg()}, -1)
	if p.err != nil {
		return
	}
	body()
	if p.err == nil {
		p.ops[at].skip = uintptr(len(p.ops) - at - 1)
	}
}

// Store32 appends a step that writes the value of s, as an int32, at
// b[off:off+4] (b from [Prog.Bytes]): a descriptor into a struct that a
// later step passes to the kernel.
func (p *Prog) Store32(what string, b []byte, off int, s Slot) {
	if off < 0 || off+4 > len(b) || !p.owns(b) {
		p.fail(fmt.Errorf("rawchild: %s: the address is not in the program's memory", what))
		return
	}
	p.add(what, opStore, 0, []Arg{Val(0), s.Arg()}, -1)
	if p.err == nil {
		p.ops[len(p.ops)-1].at = unsafe.Pointer(&b[off])
	}
}

// Allow makes errno count as success for the last step.
func (p *Prog) Allow(errno syscall.Errno) {
	if n := len(p.ops); n > 0 {
		p.ops[n-1].okErr = uintptr(errno)
	}
}

// Expect makes the last step fail (with EIO) unless it returns n: a write
// that wrote less than all of its buffer.
func (p *Prog) Expect(n uintptr) {
	if k := len(p.ops); k > 0 {
		p.ops[k-1].want, p.ops[k-1].wantOK = n, true
	}
}

// Len is the number of steps.
func (p *Prog) Len() int { return len(p.ops) }

func (p *Prog) add(what string, kind opKind, trap uintptr, args []Arg, save int8) {
	if len(args) > 6 {
		p.fail(fmt.Errorf("rawchild: %s: %d arguments", what, len(args)))
		return
	}
	o := op{kind: kind, trap: trap, save: save, tag: p.tag}
	if w := what[:min(len(what), maxWhat)]; len(w) > 0 {
		b := p.alloc(len(w))
		copy(b, w)
		o.what, o.nwhat = &b[0], uintptr(len(b))
	}
	for i := range o.from {
		o.from[i] = -1
	}
	for i, a := range args {
		if a.slot >= 0 && (a.slot >= maxSlots || p.filled&(1<<uint(a.slot)) == 0) {
			p.fail(fmt.Errorf("rawchild: %s: argument %d uses a slot no earlier step filled", what, i))
			return
		}
		o.arg[i], o.from[i] = a.v, a.slot
	}
	if p.ops == nil {
		p.ops = make([]op, 0, 512) // a block's program: about 400 steps
	}
	p.ops = append(p.ops, o)
}

// owns reports whether b lies in p's memory.
func (p *Prog) owns(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	at := uintptr(unsafe.Pointer(&b[0]))
	for _, m := range p.chunks {
		lo := uintptr(unsafe.Pointer(&m[0]))
		if at >= lo && at+uintptr(len(b)) <= lo+uintptr(len(m)) {
			return true
		}
	}
	return false
}

func (p *Prog) fail(err error) {
	if p.err == nil {
		p.err = err
	}
}
