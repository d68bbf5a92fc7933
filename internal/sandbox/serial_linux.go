//go:build linux

package sandbox

import (
	"sync/atomic"
	"time"

	"github.com/codellm/codellm/internal/sandbox/cgroup"
)

// groupClock counts the cgroups a Sandbox makes and removes and the time
// that takes (SerialStats).
type groupClock struct {
	made, removed        atomic.Int64
	makeTime, removeTime atomic.Int64 // nanoseconds
}

// newGroup is cgroup.Host.NewGroup, counted.
func (p *platform) newGroup(name string, lim cgroup.Limits) (*cgroup.Group, error) {
	t0 := time.Now()
	g, err := p.cg.NewGroup(name, lim)
	p.clock.made.Add(1)
	p.clock.makeTime.Add(int64(time.Since(t0)))
	return g, err
}

// newBlockGroup is blockGroup, counted.
func (p *platform) newBlockGroup(run *cgroup.Group, name string, use mechSet) (*cgroup.Group, error) {
	t0 := time.Now()
	g, err := blockGroup(run, name, use)
	p.clock.made.Add(1)
	p.clock.makeTime.Add(int64(time.Since(t0)))
	return g, err
}

// removeGroup is g.Remove, counted.
func (p *platform) removeGroup(g *cgroup.Group) error {
	t0 := time.Now()
	err := g.Remove()
	p.clock.removed.Add(1)
	p.clock.removeTime.Add(int64(time.Since(t0)))
	return err
}

// SerialStats returns the counters of what blocks pass through one at a
// time (see SerialStats).
func (s *Sandbox) SerialStats() SerialStats {
	p := &s.plat
	var st SerialStats
	if p.spawner != nil {
		sp, wait, n := p.spawner.stats()
		st.Spawners, st.SpawnerRequests, st.SpawnerHeld, st.SpawnerBusy, st.SpawnerWait = n, sp.Requests, sp.Held, sp.Busy, wait
	}
	if c := p.clock; c != nil {
		st.GroupsMade, st.GroupMake = c.made.Load(), time.Duration(c.makeTime.Load())
		st.GroupsRemoved, st.GroupRemove = c.removed.Load(), time.Duration(c.removeTime.Load())
	}
	return st
}
