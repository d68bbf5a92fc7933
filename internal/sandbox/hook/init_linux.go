//go:build linux

package hook

import (
	"os"
	"os/signal"
	"syscall"
)

// forwarded are the signals the init passes on to the program: what a
// terminal, a supervisor or codellm's own timeout sends to ask a process to
// stop.
var forwarded = [...]os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT}

// ignored are the other signals whose default action in a Go program ends
// it; the init ignores them (the kernel then drops them, as for any PID 1
// without a handler) once the program has started, so that the program
// inherits none of these dispositions. Subscribing to every signal instead
// would cost a round trip to the runtime's signal thread per signal, over
// a millisecond per block.
var ignored = [...]os.Signal{syscall.SIGABRT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE, syscall.SIGALRM,
	syscall.SIGXCPU, syscall.SIGXFSZ, syscall.SIGVTALRM, syscall.SIGIO, syscall.SIGPWR}

// HoldSignal is what the server sends a holding init (Spec.Hold) instead of
// SIGKILL: the init ends everything else in its namespace at once, as the
// kernel would at its own death, but lives on with the private workdir.
// The program may send it too; it then only kills itself.
const HoldSignal = syscall.SIGUSR2

// runInit is the helper's last step when the block has its own PID
// namespace: instead of becoming the program (which, as PID 1, would be
// immune to every signal it has no handler for, even its own kill -9), the
// fully confined helper stays PID 1 and starts the program as its child.
// The child inherits every per-thread confinement of this thread (seccomp,
// Landlock, no_new_privs, the empty capability sets, the rlimits). The
// init's own work runs on this thread too (the runtime keeps the main
// goroutine on it during package initialisation), except the relay of a
// forwarded signal, a kill(2) from another runtime thread. The seccomp
// filter (installed with TSYNC), no_new_privs and the empty capability sets
// cover every thread of the init (onThreads); the Landlock domain only this
// one (see restrictLandlock).
//
// It reaps every process that is orphaned into it and exits as soon as the
// program is reaped; the kernel then kills whatever else is left in the
// namespace. Before exiting it writes the program's wait status on the
// status pipe ([WaitRecord]): a PID-namespace init cannot die of a signal
// it raises itself, so its exit code alone could not carry "killed by
// SIGABRT". With Spec.Hold it does not exit but holds (see hold). It never
// returns.
func runInit(sp *Spec) {
	sigs := make(chan os.Signal, 64)
	// Before the program exists, so no early SIGTERM is missed. (A
	// pre-started helper could subscribe while it waits for its block: that
	// took the four signals' round trips to the runtime's signal thread,
	// 1.65–2.3 ms, off the block's path, but on two cores the reply came no
	// sooner, so it is not done: BENCHMARKS.md, "Where a block's wall time
	// goes".)
	signal.Notify(sigs, forwarded[:]...)
	if sp.Hold {
		signal.Notify(sigs, HoldSignal)
	}
	// The relay starts (and parks) before the fork, so that no goroutine
	// is made, and no runtime thread started for it, once the program runs.
	progc := make(chan int, 1)
	go relay(sigs, progc)
	pid := startProgram(sp)
	if sp.Hold {
		signal.Ignore(ignoredExcept(HoldSignal)...)
	} else {
		signal.Ignore(ignored[:]...)
	}
	progc <- pid
	ws := reap(pid)
	if sp.Hold {
		hold(ws)
	}
	exitLike(ws)
}

// startProgram forks the program (after pinning PIDs for a deterministic
// block), reports Started and gives up the block's pipes; on failure it
// reports and exits.
func startProgram(sp *Spec) int {
	if len(sp.Determ) > 0 {
		if err := quietPIDs(); err != nil {
			_, _ = syscall.Write(StatusFD, Failure(MHelper, err.Error()))
			syscall.Exit(125)
		}
	}
	Trace("h.fork")
	pid, err := syscall.ForkExec(sp.Path, sp.Args, &syscall.ProcAttr{
		Env:   sp.Env,
		Files: []uintptr{0, 1, 2},
		// Its own process group: `kill 0` in a script signals its jobs, not the init.
		Sys: &syscall.SysProcAttr{Setpgid: true},
	})
	if err != nil {
		_, _ = syscall.Write(StatusFD, Failure(MExec, sp.Path+": "+err.Error()))
		syscall.Exit(127)
	}
	Trace("h.forked")
	if _, err := syscall.Write(StatusFD, []byte{Started}); err != nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		syscall.Exit(126)
	}
	// The init must not hold the block's pipes: a program that closes its
	// stdout must give its reader EOF, as it would without an init.
	for fd := 0; fd <= 2; fd++ {
		syscall.Close(fd)
	}
	return pid
}

func ignoredExcept(keep os.Signal) []os.Signal {
	var out []os.Signal
	for _, s := range ignored {
		if s != keep {
			out = append(out, s)
		}
	}
	return out
}

// relay passes each forwarded signal on to the program, once its pid is
// known; HoldSignal (only subscribed with Spec.Hold) instead kills every
// other process of the namespace (kill(2) of -1 by a namespace's init
// spares only the init).
func relay(sigs <-chan os.Signal, progc <-chan int) {
	pid := <-progc
	for s := range sigs {
		if s == HoldSignal {
			_ = syscall.Kill(-1, syscall.SIGKILL)
			continue
		}
		_ = syscall.Kill(pid, s.(syscall.Signal))
	}
}

// hold ends whatever the program left in the namespace (daemons, a
// background job still writing), reaps it all, so that nothing can change
// the workdir any more, then reports the program's wait status and waits,
// holding the namespace and its private mounts for the server to read
// through /proc/<init>/root, until the server kills it (or dies: the
// helper's parent-death signal).
func hold(ws syscall.WaitStatus) {
	_ = syscall.Kill(-1, syscall.SIGKILL)
	for {
		var st syscall.WaitStatus
		_, err := syscall.Wait4(-1, &st, 0, nil)
		if err != nil && err != syscall.EINTR {
			break // ECHILD: the namespace holds only the init
		}
	}
	_, _ = syscall.Write(StatusFD, WaitRecord(uint32(ws)))
	for {
		// No descriptors, no timeout: sleeps until a signal, never returns
		// otherwise.
		_, _ = syscall.Select(0, nil, nil, nil, nil)
	}
}

// reap reaps every child that ends until the program does, and returns the
// program's wait status.
func reap(prog int) syscall.WaitStatus {
	for {
		var ws syscall.WaitStatus
		wpid, err := syscall.Wait4(-1, &ws, 0, nil)
		if err == nil && wpid == prog {
			return ws
		}
		if err != nil && err != syscall.EINTR {
			// ECHILD cannot happen while the program is unreaped; never spin.
			return syscall.WaitStatus(127 << 8)
		}
	}
}

// exitLike reports the program's wait status and exits with its exit code
// (128+signal when a signal ended it, the shell's convention, for a reader
// that ignores the status record).
func exitLike(ws syscall.WaitStatus) {
	_, _ = syscall.Write(StatusFD, WaitRecord(uint32(ws)))
	if ws.Signaled() {
		syscall.Exit(128 + int(ws.Signal()))
	}
	syscall.Exit(ws.ExitStatus())
}
