//go:build linux && (amd64 || arm64)

package rawchild

import (
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// envGoInit makes the test binary a Go init (goInit) instead of running
// tests: the comparison BenchmarkInit draws.
const envGoInit = "RAWCHILD_GO_INIT"

// goInit is the smallest Go init: fork and exec argv, reap it, exit like
// it. What a Go helper pays before and after its system calls is this
// binary's runtime start and exit, around the same fork and wait.
func goInit(argv []string) {
	pid, err := syscall.ForkExec(argv[0], argv, &syscall.ProcAttr{Files: []uintptr{0, 1, 2}})
	if err != nil {
		os.Exit(127)
	}
	var ws syscall.WaitStatus
	for {
		if _, err := syscall.Wait4(pid, &ws, 0, nil); err != syscall.EINTR {
			break
		}
	}
	os.Exit(ws.ExitStatus())
}

// BenchmarkInit starts an init in a helper's namespaces (user, PID, mount,
// network, IPC, UTS) that runs /bin/true and exits: "raw" is this package's
// child (forked, never exec'd), "raw+lockdown" the same after a block's
// lockdown (benchLockdown), "raw+root+lockdown" with a private root of
// binds and proc first, "go" the test binary exec'd as a Go init
// (goInit, no lockdown), as a Go helper is. The CPU of the init and everything it
// reaped (wait4's rusage) is the number to compare; wall time is reported
// as a median.
//
//	go test -run '^$' -bench Init -benchtime 300x ./internal/sandbox/rawchild/
func BenchmarkInit(b *testing.B) {
	if _, err := os.Stat("/proc/self/ns/user"); err != nil {
		b.Skip("no user namespaces")
	}
	const flags = syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS | syscall.CLONE_NEWNET |
		syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer null.Close()
	uid, gid := strconv.Itoa(os.Getuid()), strconv.Itoa(os.Getgid())
	// raw measures this package's child with the steps build appends
	// (compiled per iteration, as they would be per block).
	raw := func(b *testing.B, build func(*Prog)) {
		measureInit(b, func() int {
			p := &Prog{}
			build(p)
			pid, err := Start(p, Program{Path: "/bin/true", Args: []string{"true"}},
				Attr{Cloneflags: flags, UIDMap: "0 " + uid + " 1", GIDMap: "0 " + gid + " 1",
					Stdin: null, Stdout: null, Stderr: null, Status: null})
			if err != nil {
				b.Fatal(err)
			}
			return pid
		})
	}
	b.Run("raw", func(b *testing.B) { raw(b, func(*Prog) {}) })
	b.Run("raw+lockdown", func(b *testing.B) {
		lock := benchLockdown(b)
		raw(b, func(p *Prog) { p.AddLockdown(lock) })
	})
	b.Run("raw+root+lockdown", func(b *testing.B) {
		lock, staging, work := benchLockdown(b), b.TempDir(), b.TempDir()
		raw(b, func(p *Prog) {
			p.AddRoot(Root{Staging: staging, Size: 1 << 20, Proc: true, Binds: append(systemBinds(),
				Bind{Source: "/etc", Target: "/etc"}, Bind{Source: work, Target: "/work", Writable: true})})
			p.AddLockdown(lock)
		})
	})
	b.Run("go", func(b *testing.B) {
		exe, err := os.Executable()
		if err != nil {
			b.Fatal(err)
		}
		measureInit(b, func() int {
			pid, err := syscall.ForkExec(exe, []string{exe, "/bin/true"}, &syscall.ProcAttr{
				Env:   []string{envGoInit + "=1", "GOGC=off", "GOMAXPROCS=1"},
				Files: []uintptr{null.Fd(), null.Fd(), null.Fd()},
				Sys: &syscall.SysProcAttr{Cloneflags: flags,
					UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
					GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}},
			})
			if err != nil {
				b.Fatal(err)
			}
			return pid
		})
	})
}

// benchLockdown is a block's lockdown as the sandbox builds it: four
// rlimits, no_new_privs, Landlock over the system directories, every
// capability dropped and the sandbox's seccomp filter. Compiling it is part
// of each iteration, as it would be per block.
func benchLockdown(b testing.TB) Lockdown {
	prog := sandboxFilter(b)
	rules := systemRules()
	for _, f := range []string{"/dev/null", "/dev/zero", "/dev/urandom"} {
		rules = append(rules, LandlockRule{Path: f, Access: llReadFile, Optional: true}) // a file takes file rights only
	}
	for _, d := range []string{"/proc", "/tmp", "/sbin", "/opt", "/var", "/srv", "/home", "/root", "/run", "/mnt", "/media", "/sys"} {
		rules = append(rules, LandlockRule{Path: d, Access: llReadFile | llReadDir, Optional: true})
	}
	return Lockdown{
		Rlimits: []Rlimit{{"CORE", syscall.RLIMIT_CORE, 0}, {"FSIZE", syscall.RLIMIT_FSIZE, 1 << 30},
			{"NOFILE", syscall.RLIMIT_NOFILE, 1024}, {"CPU", syscall.RLIMIT_CPU, 60}},
		NoNewPrivs: true,
		Landlock:   &Landlock{ABI: 1, HandledFS: llABI1, Rules: rules},
		DropCaps:   true,
		Seccomp:    prog,
	}
}

func measureInit(b *testing.B, start func() int) {
	var cpu time.Duration
	var walls []time.Duration
	for b.Loop() {
		t0 := time.Now()
		pid := start()
		var ws syscall.WaitStatus
		var ru syscall.Rusage
		for {
			if _, err := syscall.Wait4(pid, &ws, 0, &ru); err != syscall.EINTR {
				break
			}
		}
		walls = append(walls, time.Since(t0))
		if ws.ExitStatus() != 0 {
			b.Fatalf("init: %v", ws)
		}
		cpu += time.Duration(syscall.TimevalToNsec(ru.Utime) + syscall.TimevalToNsec(ru.Stime))
	}
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "child-cpu-ns/op")
	b.ReportMetric(float64(median(walls).Nanoseconds()), "p50-ns")
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s[len(s)/2]
}
