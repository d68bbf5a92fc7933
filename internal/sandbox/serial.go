package sandbox

import "time"

// SerialStats are counters, since the Sandbox was made, of what blocks pass
// through one at a time: where one is busy for d per block, no number of
// cores runs more than 1/d blocks a second through it. /metrics exports
// them (codellm_sandbox_serial_*) and bench's scaling row divides them by
// its requests.
type SerialStats struct {
	// Spawners is how many spawners run now (at most one per four CPUs).
	Spawners int
	// SpawnerRequests counts the helpers asked of spawners; SpawnerHeld is
	// how long blocks held a spawner for those round trips (request sent to
	// reply read) and SpawnerBusy how long the spawners' own loops worked
	// (the helper forked ahead after a reply included): a spawner serves
	// one block at a time, so per spawner the larger of the two per block
	// bounds its rate.
	SpawnerRequests int64
	SpawnerHeld     time.Duration
	SpawnerBusy     time.Duration
	// SpawnerWait is how long blocks waited for a free spawner, every
	// running one busy and no more allowed.
	SpawnerWait time.Duration
	// GroupsMade and GroupMake count the run and block cgroups made and the
	// time it took (mkdir and the limit writes: the kernel makes and
	// removes cgroups under one lock of the whole host, cgroup_mutex);
	// GroupsRemoved and GroupRemove the same for their removal.
	GroupsMade    int64
	GroupMake     time.Duration
	GroupsRemoved int64
	GroupRemove   time.Duration
}
