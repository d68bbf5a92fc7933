//go:build !linux

package cgroup

import "time"

// Host is the usable cgroup hierarchy; on this platform there is none.
type Host struct{ err error }

// Group is a control group; it cannot exist on this platform.
type Group struct{}

// DefaultWait is a sensible bound for WaitEmpty after Kill.
const DefaultWait = 2 * time.Second

var errNotLinux = &UnavailableError{V2: "control groups exist only on Linux", V1: "control groups exist only on Linux"}

// Detect always fails off Linux: there are no control groups to bound a run.
func Detect() (*Host, error) { return &Host{err: errNotLinux}, errNotLinux }

// Info reports why no hierarchy is usable.
func (h *Host) Info() Info { return Info{Err: h.err.Error()} }

// NewGroup always fails off Linux.
func (h *Host) NewGroup(name string, lim Limits) (*Group, error) { return nil, h.err }

// NewChild always fails off Linux.
func (g *Group) NewChild(name string) (*Group, error) { return nil, ErrUnavailable }

// Path is empty off Linux.
func (g *Group) Path() string { return "" }

// SetCPUWeight: nothing without Linux cgroups.
func (g *Group) SetCPUWeight(n int) error { return nil }

// ProcsFiles is empty off Linux.
func (g *Group) ProcsFiles() []string { return nil }

// TaskFiles is nil off Linux.
func (g *Group) TaskFiles() []string { return nil }

// Add always fails off Linux.
func (g *Group) Add(pid int) error { return ErrUnavailable }

// FD is never available off Linux.
func (g *Group) FD() (int, bool) { return -1, false }

// Kill always fails off Linux.
func (g *Group) Kill() error { return ErrUnavailable }

// Populated always fails off Linux.
func (g *Group) Populated() (bool, error) { return false, ErrUnavailable }

// WaitEmpty always fails off Linux.
func (g *Group) WaitEmpty(timeout time.Duration) error { return ErrUnavailable }

// Stats always fails off Linux.
func (g *Group) Stats() (Stats, error) { return Stats{}, ErrUnavailable }

// Remove has nothing to remove off Linux.
func (g *Group) Remove() error { return nil }

// SweepStale has nothing to sweep off Linux.
func (h *Host) SweepStale(stale func(name string) bool) (int, error) { return 0, h.err }

// KillStale has nothing to kill off Linux.
func (h *Host) KillStale(stale func(name string) bool, wait time.Duration) (int, error) {
	return 0, h.err
}
