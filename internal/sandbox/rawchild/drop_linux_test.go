//go:build linux && (amd64 || arm64)

package rawchild

import (
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ballast is memory of the test's own, written, that a child would share.
var ballast []byte

// Differential: an init that keeps its copy of the caller's memory holds the
// caller's written anonymous pages (here a 32 MiB ballast) for as long as
// its program runs; by default it lets go of them once the program runs.
func TestInitLetsGoOfTheCallersMemory(t *testing.T) {
	ballast = make([]byte, 32<<20)
	for i := range ballast {
		ballast[i] = 1
	}
	for _, keep := range []bool{true, false} {
		p := &Prog{}
		inR, inW := pipe(t)
		c := startAttr(t, p, sh("echo up; read x"), Attr{Stdin: inR, KeepShared: keep})
		inR.Close()
		up := make([]byte, 3)
		if _, err := io.ReadFull(c.stdout, up); err != nil {
			t.Fatal(err)
		}
		rss := rssAnonKiB(t, c.pid)
		// The init lets go right after it reports Started, which may come after the program's "up".
		for deadline := time.Now().Add(2 * time.Second); !keep && rss > 8<<10 && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
			rss = rssAnonKiB(t, c.pid)
		}
		inW.Close()
		c.records(t)
		c.wait(t)
		if keep && rss < 32<<10 {
			t.Errorf("KeepShared: the init holds %d KiB of anonymous memory, want the 32 MiB ballast (the test shows nothing)", rss)
		}
		if !keep && rss > 8<<10 {
			t.Errorf("the init holds %d KiB of anonymous memory while its program runs, want it to have let go of the caller's", rss)
		}
	}
	ballast = nil
}

func rssAnonKiB(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "RssAnon:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	t.Fatal("no RssAnon")
	return 0
}
