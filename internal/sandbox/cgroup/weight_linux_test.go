package cgroup

import "testing"

// SetCPUWeight gives a group the weight of n root tasks, within the kernel's bounds, in the right file.
func TestSetCPUWeight(t *testing.T) {
	h := requireHost(t)
	if h.cpu < 0 {
		t.Skip("no cpu controller: SetCPUWeight does nothing")
	}
	g := newTestGroup(t, h, Limits{})
	file, def := g.dirs[h.cpu]+"/cpu.shares", "1024"
	if h.version == 2 {
		file, def = g.dirs[0]+"/cpu.weight", "100"
	}
	if got := readFileString(t, file); got != def {
		t.Fatalf("a new group's weight is %s, want the default %s", got, def)
	}
	for _, c := range []struct {
		n      int
		v1, v2 string
	}{{5, "5120", "500"}, {1000, "262144", "10000"}} {
		if err := g.SetCPUWeight(c.n); err != nil {
			t.Fatal(err)
		}
		want := c.v1
		if h.version == 2 {
			want = c.v2
		}
		if got := readFileString(t, file); got != want {
			t.Errorf("SetCPUWeight(%d): %s, want %s", c.n, got, want)
		}
	}
}
