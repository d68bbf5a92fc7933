package hook

import "syscall"

// The spec travels as a flat binary record: fixed-width little-endian
// integers and length-prefixed byte strings, in Spec's field order. A
// hand-written format (rather than encoding/json) keeps this package free of
// dependencies, which is what lets its init run first.

// maxSpec bounds what the helper reads: argv and environment are bounded
// by the kernel's ARG_MAX anyway.
const maxSpec = 16 << 20

type enc struct{ b []byte }

func (e *enc) u64(v uint64) {
	e.b = append(e.b, byte(v), byte(v>>8), byte(v>>16), byte(v>>24), byte(v>>32), byte(v>>40), byte(v>>48), byte(v>>56))
}
func (e *enc) bytes(p []byte) { e.u64(uint64(len(p))); e.b = append(e.b, p...) }
func (e *enc) str(s string)   { e.u64(uint64(len(s))); e.b = append(e.b, s...) }
func (e *enc) strs(ss []string) {
	e.u64(uint64(len(ss)))
	for _, s := range ss {
		e.str(s)
	}
}
func (e *enc) flag(v bool) {
	if v {
		e.u64(1)
	} else {
		e.u64(0)
	}
}

// Encode serialises s for the helper.
func (s *Spec) Encode() []byte {
	e := &enc{b: make([]byte, 0, 4096)}
	e.str(s.Path)
	e.strs(s.Args)
	e.strs(s.Env)
	e.str(s.Dir)
	e.str(s.HostDir)
	e.flag(s.Persist)
	e.flag(s.DirIsTree)
	e.u64(uint64(s.Mech))
	e.flag(s.Network)
	e.flag(s.ProbeOnly)
	e.flag(s.Init)
	e.u64(uint64(s.TmpSize))
	e.u64(uint64(s.FileSize))
	e.u64(uint64(s.OpenFiles))
	e.u64(s.CPUSeconds)
	e.strs(s.SystemDirs)
	e.strs(s.EtcEntries)
	e.strs(s.DevNodes)
	e.bytes(s.Passwd)
	e.bytes(s.Group)
	e.bytes(s.Hosts)
	e.bytes(s.Hostname)
	e.str(s.Staging)
	e.str(s.UTSName)
	e.str(s.Shared)
	e.strs(s.HostMounts)
	e.str(s.ProbeSocket)
	e.u64(uint64(s.LandlockABI))
	e.u64(s.HandledFS)
	e.u64(s.HandledNet)
	e.u64(s.Scoped)
	e.u64(uint64(len(s.Rules)))
	for _, r := range s.Rules {
		e.str(r.Path)
		e.u64(r.Access)
		e.flag(r.Optional)
	}
	e.bytes(s.Seccomp)
	e.u64(uint64(s.CapLastCap))
	e.flag(s.Egress)
	e.bytes(s.Determ)
	e.flag(s.ReadOnly)
	e.bytes(s.FakeTimeRC)
	e.flag(s.Hold)
	e.u64(uint64(s.WorkSize))
	e.strs(s.Overlaid)
	return e.b
}

type dec struct {
	b   []byte
	bad bool
}

func (d *dec) u64() uint64 {
	if len(d.b) < 8 {
		d.bad = true
		return 0
	}
	b := d.b
	v := uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
	d.b = d.b[8:]
	return v
}
func (d *dec) bytes() []byte {
	n := d.u64()
	if d.bad || n > uint64(len(d.b)) {
		d.bad = true
		return nil
	}
	p := d.b[:n:n]
	d.b = d.b[n:]
	return p
}
func (d *dec) str() string { return string(d.bytes()) }
func (d *dec) strs() []string {
	n := d.u64()
	if d.bad || n > uint64(len(d.b))/8 {
		d.bad = true
		return nil
	}
	out := make([]string, 0, n)
	for i := uint64(0); i < n && !d.bad; i++ {
		out = append(out, d.str())
	}
	return out
}
func (d *dec) flag() bool { return d.u64() != 0 }

// errBadSpec is returned by Decode for a truncated or malformed record.
var errBadSpec = syscall.EINVAL

// Decode parses a record made by Encode. Trailing bytes, truncation or
// absurd lengths are errors: a helper never guesses.
func Decode(b []byte) (*Spec, error) {
	d := &dec{b: b}
	s := &Spec{}
	s.Path = d.str()
	s.Args = d.strs()
	s.Env = d.strs()
	s.Dir = d.str()
	s.HostDir = d.str()
	s.Persist = d.flag()
	s.DirIsTree = d.flag()
	s.Mech = uint32(d.u64())
	s.Network = d.flag()
	s.ProbeOnly = d.flag()
	s.Init = d.flag()
	s.TmpSize = int64(d.u64())
	s.FileSize = int64(d.u64())
	s.OpenFiles = int64(d.u64())
	s.CPUSeconds = d.u64()
	s.SystemDirs = d.strs()
	s.EtcEntries = d.strs()
	s.DevNodes = d.strs()
	s.Passwd = d.bytes()
	s.Group = d.bytes()
	s.Hosts = d.bytes()
	s.Hostname = d.bytes()
	s.Staging = d.str()
	s.UTSName = d.str()
	s.Shared = d.str()
	s.HostMounts = d.strs()
	s.ProbeSocket = d.str()
	s.LandlockABI = int64(d.u64())
	s.HandledFS = d.u64()
	s.HandledNet = d.u64()
	s.Scoped = d.u64()
	n := d.u64()
	if n > uint64(len(d.b))/8 {
		d.bad = true
	}
	for i := uint64(0); i < n && !d.bad; i++ {
		s.Rules = append(s.Rules, LandlockRule{Path: d.str(), Access: d.u64(), Optional: d.flag()})
	}
	s.Seccomp = d.bytes()
	s.CapLastCap = int64(d.u64())
	s.Egress = d.flag()
	s.Determ = d.bytes()
	s.ReadOnly = d.flag()
	s.FakeTimeRC = d.bytes()
	s.Hold = d.flag()
	s.WorkSize = int64(d.u64())
	s.Overlaid = d.strs()
	if d.bad || len(d.b) != 0 || len(s.Seccomp)%8 != 0 {
		return nil, errBadSpec
	}
	return s, nil
}

// Failure encodes a setup failure report (what the helper writes on the
// status pipe).
func Failure(mech uint32, reason string) []byte {
	b := []byte{failTag, byte(mech), byte(mech >> 8), byte(mech >> 16), byte(mech >> 24)}
	return append(b, reason...)
}

// ParseStatus interprets everything the helper wrote on the status pipe:
// started reports the Started byte; failed reports a failure with its
// mechanism bit and reason. ok is false for bytes that are neither (a
// helper that is not ours, or a torn write).
func ParseStatus(msg []byte) (started, failed bool, mech uint32, reason string, ok bool) {
	if len(msg) > 0 && msg[0] == Started {
		started = true
		msg = msg[1:]
	}
	if len(msg) == 0 {
		return started, false, 0, "", true
	}
	if msg[0] != failTag || len(msg) < 5 {
		return started, false, 0, "", false
	}
	mech = uint32(msg[1]) | uint32(msg[2])<<8 | uint32(msg[3])<<16 | uint32(msg[4])<<24
	return started, true, mech, string(msg[5:]), true
}

// StartedRecord is what an init writes once the program runs: Started and
// the program's PID in the block's PID namespace.
func StartedRecord(pid int) []byte {
	return []byte{Started, byte(pid), byte(pid >> 8), byte(pid >> 16), byte(pid >> 24)}
}

// ParseStartedPID decodes the PID that follows an init's Started byte.
func ParseStartedPID(b [4]byte) int {
	return int(int32(uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24))
}

// WaitRecord encodes the init's report of the program's wait status.
func WaitRecord(ws uint32) []byte {
	return []byte{waitTag, byte(ws), byte(ws >> 8), byte(ws >> 16), byte(ws >> 24)}
}

// ParseWait decodes what an init wrote on the status pipe after Started:
// the program's raw wait status, ok false when there is no (complete)
// record (the init was killed before the program ended).
func ParseWait(msg []byte) (ws uint32, ok bool) {
	if len(msg) != 5 || msg[0] != waitTag {
		return 0, false
	}
	return uint32(msg[1]) | uint32(msg[2])<<8 | uint32(msg[3])<<16 | uint32(msg[4])<<24, true
}
