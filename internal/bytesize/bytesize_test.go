package bytesize

import "testing"

// One table for every size codellm reads (serve, hub, worker): issue 15 found the hub refusing 64M and
// 10MB that serve accepted.
func TestParse(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64 // -1: an error
	}{
		{"0", 0}, {"1000", 1000}, {" 42 ", 42}, {"7B", 7},
		{"64K", 64 << 10}, {"64KiB", 64 << 10}, {"64kb", 64000},
		{"64M", 64 << 20}, {"64MiB", 64 << 20}, {"64mib", 64 << 20}, {"64MB", 64000000}, {"10MB", 10000000},
		{"64 MiB", 64 << 20}, {"1G", 1 << 30}, {"1GiB", 1 << 30}, {"1GB", 1000000000}, {"4611686018427387904", 1 << 62},
		{"", -1}, {"MiB", -1}, {"-1", -1}, {"1.5MiB", -1}, {"64TiB", -1}, {"64X", -1}, {"4294967297GiB", -1}, {"0x10", -1},
	} {
		got, err := Parse(c.in)
		if c.want < 0 {
			if err == nil {
				t.Errorf("Parse(%q) = %d, want an error", c.in, got)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("Parse(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
}

func TestFormatRoundTrips(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want string
	}{{0, "0"}, {1000, "1000"}, {64 << 10, "64KiB"}, {10 << 20, "10MiB"}, {512 << 20, "512MiB"}, {3 << 30, "3GiB"}, {1<<20 + 1, "1048577"}} {
		s := Format(c.n)
		if s != c.want {
			t.Errorf("Format(%d) = %q, want %q", c.n, s, c.want)
		}
		if back, err := Parse(s); err != nil || back != c.n {
			t.Errorf("Parse(Format(%d)) = %d, %v", c.n, back, err)
		}
	}
}
