package hook

import (
	"reflect"
	"testing"
)

func fullSpec() *Spec {
	return &Spec{
		Path: "/usr/bin/python3", Args: []string{"python3", "-c", "print('é\x00')"}, Env: []string{"A=1", ""},
		Dir: "/tmp/w", Persist: true, DirIsTree: true, Mech: MUserNS | MSeccomp | MCaps, Network: true, ProbeOnly: true, Egress: true, Init: true, Determ: []byte("0123456789abcdef0123456789abcdef"),
		TmpSize: 64 << 20, FileSize: -1, OpenFiles: 1024, CPUSeconds: 1<<63 + 5,
		SystemDirs: []string{"/usr", "/bin"}, EtcEntries: []string{"ld.so.cache"}, DevNodes: []string{"null"},
		Passwd: []byte("root:x:0:0\n"), Group: []byte("g\n"), Hosts: []byte("h\n"), Hostname: []byte("codellm\n"),
		Staging: "/tmp", UTSName: "codellm", Shared: "/kit", HostMounts: []string{"/usr/local/x"}, Overlaid: []string{"/usr", "/etc"}, ProbeSocket: "p.sock",
		LandlockABI: 7, HandledFS: 0xffff, HandledNet: 3, Scoped: 3,
		Rules:   []LandlockRule{{Path: "/usr", Access: 7, Optional: true}, {Path: "/", Access: 8}},
		Seccomp: []byte{1, 2, 3, 4, 5, 6, 7, 8}, CapLastCap: 40, FakeTimeRC: []byte("@2024-01-01 00:00:00 i0.001\n"), ReadOnly: true, Hold: true, WorkSize: 256 << 20,
	}
}

func TestSpecRoundTrip(t *testing.T) {
	want := fullSpec()
	got, err := Decode(want.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
	}
}

// Every truncation and any trailing garbage must be refused, never
// half-applied: the helper would otherwise confine according to zeros.
func TestDecodeRejectsDamagedSpecs(t *testing.T) {
	b := fullSpec().Encode()
	for n := 0; n < len(b); n++ {
		if _, err := Decode(b[:n]); err == nil {
			t.Fatalf("truncated to %d of %d bytes: accepted", n, len(b))
		}
	}
	if _, err := Decode(append(b[:len(b):len(b)], 0)); err == nil {
		t.Fatal("trailing byte accepted")
	}
	// An absurd length prefix (the first string's) must not allocate or
	// read past the buffer.
	bad := append([]byte{}, b...)
	for i := 0; i < 8; i++ {
		bad[i] = 0xff
	}
	if _, err := Decode(bad); err == nil {
		t.Fatal("huge length accepted")
	}
	// A seccomp program that is not whole sock_filter records.
	s := fullSpec()
	s.Seccomp = []byte{1, 2, 3}
	if _, err := Decode(s.Encode()); err == nil {
		t.Fatal("partial sock_filter accepted")
	}
}

func TestParseStatus(t *testing.T) {
	for _, c := range []struct {
		msg                 string
		started, failed, ok bool
		mech                uint32
		reason              string
	}{
		{"", false, false, true, 0, ""},
		{"X", true, false, true, 0, ""},
		{string(Failure(MRootFS, "mount /proc: EPERM")), false, true, true, MRootFS, "mount /proc: EPERM"},
		{"X" + string(Failure(MExec, "/bin/nope: no such file")), true, true, true, MExec, "/bin/nope: no such file"},
		{"garbage", false, false, false, 0, ""},
		{"E\x01", false, false, false, 0, ""},
	} {
		started, failed, mech, reason, ok := ParseStatus([]byte(c.msg))
		if started != c.started || failed != c.failed || ok != c.ok || mech != c.mech || reason != c.reason {
			t.Errorf("ParseStatus(%q) = %v %v %d %q %v", c.msg, started, failed, mech, reason, ok)
		}
	}
}

// The init's Started record carries the program's namespace PID, which the
// server decodes to find the program (any PID a namespace can hold).
func TestStartedRecordRoundTrip(t *testing.T) {
	for _, pid := range []int{0, 2, 255, 256, 65536, 4194304} {
		rec := StartedRecord(pid)
		if len(rec) != 5 || rec[0] != Started {
			t.Fatalf("StartedRecord(%d) = %v", pid, rec)
		}
		if got := ParseStartedPID([4]byte(rec[1:])); got != pid {
			t.Fatalf("ParseStartedPID(StartedRecord(%d)) = %d", pid, got)
		}
	}
}
