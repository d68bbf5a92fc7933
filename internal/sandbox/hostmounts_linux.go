//go:build linux

package sandbox

import (
	"strings"
	"sync"
	"time"

	"github.com/codellm/codellm/internal/sandbox/hook"
	"golang.org/x/sys/unix"
)

// hostMounts is the mount table of codellm's own mount namespace, which
// every helper's namespace starts as a copy of. The helper needs to know
// which mirrored host directories have mounts below them (an overlay of
// such a directory is refused by the kernel; see hook.sysTree), and
// reading /proc/self/mountinfo costs about 0.6 ms with a hundred mounts
// (runner workspaces are mounts), measured on the CI host: too much for
// every block. So the server keeps it open and re-reads it only after the
// kernel says it changed (poll reports POLLPRI after any mount or unmount
// in the namespace). The helper re-reads its own copy when an overlay
// fails anyway (a mount made between the two).
//
// Even that is once per request on a server whose runner workspaces are
// tmpfs mounts (each request mounts and unmounts one), 7 % of a request's
// CPU in the profile (BENCHMARKS.md). A stale list is safe both ways — a
// mount it misses makes the helper's overlay fail and re-read, one it
// still lists only makes the helper mirror that directory entry by entry —
// so the table is checked for changes at most once per rereadEvery.
var hostMounts mountTable

// rereadEvery bounds how often the server looks at the mount table again.
const rereadEvery = time.Second

type mountTable struct {
	mu      sync.Mutex
	fd      int // -1 after a failure: the helper then reads mountinfo itself
	opened  bool
	points  []string
	checked time.Time // last poll for changes
}

// below returns the mount points strictly below any of dirs (the first
// call opens the table: one descriptor per process, kept for its life).
func (m *mountTable) below(dirs []string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.opened {
		m.opened = true
		fd, err := unix.Open("/proc/self/mountinfo", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			m.fd = -1
		} else {
			m.fd = fd
			m.reread()
		}
		m.checked = time.Now()
	} else if m.fd >= 0 && time.Since(m.checked) >= rereadEvery {
		m.checked = time.Now()
		pfd := []unix.PollFd{{Fd: int32(m.fd), Events: unix.POLLPRI}}
		if n, err := unix.Poll(pfd, 0); err != nil || n > 0 {
			m.reread()
		}
	}
	if m.fd < 0 {
		return nil
	}
	var out []string
	for _, p := range m.points {
		for _, d := range dirs {
			if strings.HasPrefix(p, d+"/") {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// refresh reads the table now, opening it again after a failure.
func (m *mountTable) refresh() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.opened, m.checked = true, time.Now()
	if m.fd < 0 {
		fd, err := unix.Open("/proc/self/mountinfo", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return
		}
		m.fd = fd
	}
	m.reread()
}

func (m *mountTable) reread() {
	var b []byte
	buf := make([]byte, 64<<10)
	_, err := unix.Seek(m.fd, 0, 0)
	for err == nil {
		var n int
		n, err = unix.Read(m.fd, buf)
		if err == unix.EINTR {
			err = nil
			continue
		}
		if err != nil || n == 0 {
			break
		}
		b = append(b, buf[:n]...)
	}
	if err != nil {
		unix.Close(m.fd)
		m.fd, m.points = -1, nil
		return
	}
	m.points = hook.ParseMountPoints(b)
}
