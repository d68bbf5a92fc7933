//go:build linux && (amd64 || arm64)

package rawchild

import (
	"encoding/binary"
	"fmt"
	"io"
	"syscall"
)

// Record kinds, the first word of a status record.
const (
	KindFailed  = 'F' // A: the step's index (Prog.Len() for the program's exec), B: its errno
	KindStarted = 'S' // A: the program's PID (in the child's PID namespace)
	KindWaited  = 'W' // A: the program's wait status
)

// RecordSize is the size of one status record: three little-endian uint32s.
const RecordSize = 12

// Record is one report of the child's.
type Record struct {
	Kind uint32
	A, B uint32
}

// ReadRecord reads the next record from r; io.EOF when the child closed
// its end without another.
func ReadRecord(r io.Reader) (Record, error) {
	var b [RecordSize]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		if err == io.ErrUnexpectedEOF {
			return Record{}, fmt.Errorf("rawchild: a truncated status record")
		}
		return Record{}, err
	}
	return Record{
		Kind: binary.LittleEndian.Uint32(b[0:]),
		A:    binary.LittleEndian.Uint32(b[4:]),
		B:    binary.LittleEndian.Uint32(b[8:]),
	}, nil
}

// StepError is a step of the child's that failed.
type StepError struct {
	Step  int
	What  string
	Errno syscall.Errno
}

func (e *StepError) Error() string {
	return fmt.Sprintf("rawchild: step %d (%s): %v", e.Step, e.What, e.Errno)
}

func (e *StepError) Unwrap() error { return e.Errno }

// Err turns a KindFailed record into the error it reports, naming the
// step with p.
func (r Record) Err(p *Prog) error {
	if r.Kind != KindFailed {
		return nil
	}
	return &StepError{Step: int(r.A), What: p.What(int(r.A)), Errno: syscall.Errno(r.B)}
}
