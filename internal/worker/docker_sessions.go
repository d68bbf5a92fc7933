package worker

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Labels of the containers a docker supervisor makes, beside io.codellm.runtime and its profile.
const (
	labelOwner     = "io.codellm.worker"    // the worker ID (DockerConfig.Owner)
	labelStateless = "io.codellm.stateless" // an assignment-<id> container, removed after its call
)

// DockerSessions bounds a docker supervisor's session containers as the embedded runner bounds its
// sessions (the same settings: --runner-session-ttl, --runner-max-sessions, --runner-session-evict-idle).
// Each container runs a runner (codellm serve) for as long as it exists: without a bound every exec of a
// new session left one running for good (issue 35 item 3; the hub gives each exec without a session_id a
// new session).
type DockerSessions struct {
	TTL       time.Duration // idle time after which a session's container is removed; default 30 min
	Max       int           // session containers at once; default 64
	EvictIdle time.Duration // at Max, the least recently used one idle this long makes room; default 5 min
}

func (s DockerSessions) withDefaults() DockerSessions {
	if s.TTL <= 0 {
		s.TTL = 30 * time.Minute
	}
	if s.Max <= 0 {
		s.Max = 64
	}
	if s.EvictIdle <= 0 {
		s.EvictIdle = 5 * time.Minute
	}
	return s
}

// liveContainer is a session container the supervisor knows (d.mu guards it).
type liveContainer struct {
	lastUsed time.Time
	busy     int
}

// runMemory and runPids are what the runner inside may give one run: the container's bound less its own
// share (the runner process and its helpers), never less than half of the bound.
func (d *Docker) runMemory() int64 { return max(d.cfg.Memory/2, d.cfg.Memory-runnerMemory) }
func (d *Docker) runPids() int     { return max(d.cfg.Pids/2, d.cfg.Pids-runnerPids) }

// The runner's own share of a container: codellm serve's memory and tasks (threads count).
const (
	runnerMemory = 256 << 20
	runnerPids   = 64
)

// use marks the session container name in use (the caller holds its lock), making room first when it is
// new and the supervisor is at its bound: the least recently used container idle for EvictIdle is
// removed, or the call is refused before anything ran (429 too_many_sessions, known-clean).
func (d *Docker) use(ctx context.Context, name string) (release func(), err error) {
	d.mu.Lock()
	lc, known := d.live[name]
	if !known {
		lc = &liveContainer{}
		d.live[name] = lc
	}
	lc.busy++
	full := !known && len(d.live) > d.cfg.Sessions.Max
	var victim string
	var vlc *liveContainer
	if full {
		victim, vlc = d.lruIdleLocked(time.Now(), d.cfg.Sessions.EvictIdle)
	}
	n := len(d.live) - 1
	d.mu.Unlock()
	if full {
		evicted := false
		if victim != "" {
			evicted, err = d.evict(ctx, victim, vlc, d.cfg.Sessions.EvictIdle)
		}
		if !evicted || err != nil {
			d.forget(name, lc)
			if err != nil {
				return nil, &RunError{Message: "make room for a runtime container: " + err.Error(), KnownClean: true}
			}
			return nil, &RunError{Status: http.StatusTooManyRequests, KnownClean: true, Message: fmt.Sprintf(
				"too_many_sessions: %d runtime containers live (at most %d, --runner-max-sessions), none idle for %s; retry later",
				n, d.cfg.Sessions.Max, d.cfg.Sessions.EvictIdle)}
		}
	}
	return func() { d.done(lc) }, nil
}

// done ends a use of lc.
func (d *Docker) done(lc *liveContainer) {
	d.mu.Lock()
	lc.busy--
	lc.lastUsed = time.Now()
	d.mu.Unlock()
}

// forget undoes use for a container that was refused before it was made.
func (d *Docker) forget(name string, lc *liveContainer) {
	d.mu.Lock()
	if lc.busy--; lc.busy == 0 && lc.lastUsed.IsZero() && d.live[name] == lc {
		delete(d.live, name)
	}
	d.mu.Unlock()
}

// lruIdleLocked is the least recently used container not in use and idle for at least minIdle ("" when
// none is).
func (d *Docker) lruIdleLocked(now time.Time, minIdle time.Duration) (string, *liveContainer) {
	best := ""
	for n, lc := range d.live {
		if lc.busy == 0 && now.Sub(lc.lastUsed) >= minIdle && (best == "" || lc.lastUsed.Before(d.live[best].lastUsed)) {
			best = n
		}
	}
	return best, d.live[best]
}

// evict removes the container name under its lock if it is still lc, unused and idle for minIdle (a call
// that took its lock meanwhile keeps it), and reports whether it did.
func (d *Docker) evict(ctx context.Context, name string, lc *liveContainer, minIdle time.Duration) (bool, error) {
	unlock := d.lock(name)
	defer unlock()
	d.mu.Lock()
	ok := d.live[name] == lc && lc.busy == 0 && time.Since(lc.lastUsed) >= minIdle
	if ok {
		delete(d.live, name)
	}
	d.mu.Unlock()
	if !ok {
		return false, nil
	}
	return true, d.remove(ctx, name)
}

// discard removes a session's container (reset, quarantine) and forgets it.
func (d *Docker) discard(ctx context.Context, name string) error {
	if err := d.removeLocked(ctx, name); err != nil {
		return err
	}
	d.mu.Lock()
	if lc, ok := d.live[name]; ok && lc.busy == 0 {
		delete(d.live, name)
	}
	d.mu.Unlock()
	return nil
}

// janitorEvery is how often idle containers are looked for: a quarter of the TTL, at most a minute.
func (d *Docker) janitorEvery() time.Duration { return min(d.cfg.Sessions.TTL/4, time.Minute) }

func (d *Docker) startJanitor() {
	d.stopJanitor, d.janitorDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(d.janitorDone)
		t := time.NewTicker(d.janitorEvery())
		defer t.Stop()
		for {
			select {
			case <-d.stopJanitor:
				return
			case <-t.C:
				d.expire()
			}
		}
	}()
}

// expire removes the session containers idle for the TTL.
func (d *Docker) expire() {
	d.mu.Lock()
	n := len(d.live)
	d.mu.Unlock()
	for range n {
		d.mu.Lock()
		name, lc := d.lruIdleLocked(time.Now(), d.cfg.Sessions.TTL)
		d.mu.Unlock()
		if name == "" {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, _ = d.evict(ctx, name, lc, d.cfg.Sessions.TTL) // a failure is retried by the next start's adoption
		cancel()
	}
}

// Close stops the supervisor's janitor. Session containers stay for the next worker (adopted then).
func (d *Docker) Close() {
	if d.stopJanitor != nil {
		close(d.stopJanitor)
		<-d.janitorDone
		d.stopJanitor = nil
	}
}

// adopt finds the containers an earlier supervisor of the same owner left: stateless ones (a crash during
// their call) are removed, session ones are tracked from now on, their idle time counted from now.
func (d *Docker) adopt(ctx context.Context) error {
	if d.cfg.Owner == "" {
		return nil
	}
	owned := "label=" + labelOwner + "=" + d.cfg.Owner
	names, err := d.containers(ctx, owned, "label="+labelStateless+"=true")
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := d.remove(ctx, n); err != nil {
			return err
		}
	}
	if names, err = d.containers(ctx, owned); err != nil {
		return err
	}
	now := time.Now()
	for _, n := range names {
		d.live[n] = &liveContainer{lastUsed: now}
	}
	return nil
}

// containers lists the names of the runtime containers (running or not) that match every filter.
func (d *Docker) containers(ctx context.Context, filters ...string) ([]string, error) {
	args := []string{"ps", "--all", "--filter", "label=io.codellm.runtime=true"}
	for _, f := range filters {
		args = append(args, "--filter", f)
	}
	out, err := d.cli(ctx, nil, append(args, "--format", "{{.Names}}")...)
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(out)), nil
}
