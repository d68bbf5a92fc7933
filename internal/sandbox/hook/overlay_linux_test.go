package hook

import "testing"

func TestEscapeLayer(t *testing.T) {
	for in, want := range map[string]string{
		"/usr":          "/usr",
		`/a:b,c\d`:      `/a\:b\,c\\d`,
		"/proc/self/fd": "/proc/self/fd",
	} {
		if got := escapeLayer(in); got != want {
			t.Errorf("escapeLayer(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{
		`/usr/local/my\040dir`: "/usr/local/my dir",
		`/a\134b`:              `/a\b`,
		`/tab\011x\012`:        "/tab\tx\n",
		`/short\04`:            `/short\04`,
		`/not\999`:             `/not\999`,
		`/plain`:               "/plain",
		`/end\040`:             "/end ",
	} {
		if got := UnescapeMount(in); got != want {
			t.Errorf("UnescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRootFailureMechanism(t *testing.T) {
	if m := rootFailure(errOverlay{&herr{"x", nil}}); m != MOverlay {
		t.Errorf("overlay failure reported as %#x", m)
	}
	if m := rootFailure(&herr{"x", nil}); m != MRootFS {
		t.Errorf("root failure reported as %#x", m)
	}
}

func TestParseMountPoints(t *testing.T) {
	raw := "22 27 0:21 / /proc rw,relatime - proc proc rw\n" +
		"30 27 254:0 /x /usr/local/my\\040dir ro shared:1 - ext4 /dev/vda rw\n" +
		"short line\n" +
		"31 27 0:5 / /last rw - tmpfs t rw"
	got := ParseMountPoints([]byte(raw))
	want := []string{"/proc", "/usr/local/my dir", "/last"}
	if len(got) != len(want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %q, want %q", got, want)
		}
	}
}
