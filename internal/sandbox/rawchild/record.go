//go:build linux

package rawchild

import (
	"encoding/binary"
	"fmt"
	"io"
	"syscall"
)

// Record kinds, the first byte of a status record. Started and Waited are
// byte for byte the records of package hook's init ('X' and 'W', then a
// little-endian uint32), so that one reader serves both helpers (a test in
// package sandbox holds them equal).
const (
	// KindFailed: A the step's index (Prog.Len() for the program's exec),
	// B its errno; Tag and What from the step (Prog.Tag, Call's what; tag 0
	// and the program's path for its exec).
	KindFailed  = 'F'
	KindStarted = 'X' // A: the program's PID (in the child's PID namespace)
	KindWaited  = 'W' // A: the program's wait status
)

// failHeader is the fixed part of a failure record: kind, step, errno, tag
// (uint32s) and the length of What (uint16), which follows.
const failHeader = 1 + 4 + 4 + 4 + 2

// maxWhat bounds the length of a step's description in a failure record.
const maxWhat = 1 << 12

// Record is one report of the child's.
type Record struct {
	Kind uint32
	A, B uint32
	Tag  uint32 // KindFailed: the failing step's tag
	What string // KindFailed: what the failing step did
}

// ReadRecord reads the next record from r; io.EOF when the child closed
// its end without another.
func ReadRecord(r io.Reader) (Record, error) {
	var kind [1]byte
	if _, err := io.ReadFull(r, kind[:]); err != nil {
		return Record{}, err
	}
	rec := Record{Kind: uint32(kind[0])}
	switch rec.Kind {
	case KindStarted, KindWaited:
		var b [4]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return Record{}, fmt.Errorf("rawchild: a truncated status record")
		}
		rec.A = binary.LittleEndian.Uint32(b[:])
		return rec, nil
	case KindFailed:
		var b [failHeader - 1]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return Record{}, fmt.Errorf("rawchild: a truncated failure record")
		}
		rec.A, rec.B, rec.Tag = binary.LittleEndian.Uint32(b[0:]), binary.LittleEndian.Uint32(b[4:]), binary.LittleEndian.Uint32(b[8:])
		what := make([]byte, binary.LittleEndian.Uint16(b[12:]))
		if _, err := io.ReadFull(r, what); err != nil {
			return Record{}, fmt.Errorf("rawchild: a truncated failure record")
		}
		rec.What = string(what)
		return rec, nil
	}
	return Record{}, fmt.Errorf("rawchild: unknown status record %q", kind[0])
}

// StepError is a step of the child's that failed.
type StepError struct {
	Step  int
	What  string
	Tag   uint32
	Errno syscall.Errno
}

func (e *StepError) Error() string {
	return fmt.Sprintf("rawchild: step %d (%s): %v", e.Step, e.What, e.Errno)
}

func (e *StepError) Unwrap() error { return e.Errno }

// Err turns a KindFailed record into the error it reports; nil for any
// other record.
func (r Record) Err() *StepError {
	if r.Kind != KindFailed {
		return nil
	}
	return &StepError{Step: int(r.A), What: r.What, Tag: r.Tag, Errno: syscall.Errno(r.B)}
}
