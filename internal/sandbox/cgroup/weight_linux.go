package cgroup

import "strconv"

// Default CPU weights of a cgroup: what one task in the root group weighs.
const (
	v1DefaultShares = 1024 // cpu.shares
	v2DefaultWeight = 100  // cpu.weight
	v2MaxWeight     = 10000
	v1MaxShares     = 262144
)

// SetCPUWeight gives the group the CPU weight of n tasks of the root group
// (cpu.shares 1024·n on v1, cpu.weight 100·n on v2, within the kernel's
// bounds), so that under contention the group's processes together get
// what n separate processes would, rather than the share of one. Without
// the cpu controller (or for an accounting child) it does nothing.
func (g *Group) SetCPUWeight(n int) error {
	h := g.host
	if h.cpu < 0 || n < 1 || g.dirs[h.cpu] == "" { // "": an accounting child weighs with its parent
		return nil
	}
	if h.version == 2 {
		return writeFile(g.dirs[0]+"/cpu.weight", strconv.Itoa(min(v2DefaultWeight*n, v2MaxWeight)))
	}
	return writeFile(g.dirs[h.cpu]+"/cpu.shares", strconv.Itoa(min(v1DefaultShares*n, v1MaxShares)))
}
