//go:build linux

package hook

import (
	"os"
	"os/signal"
	"syscall"
)

// quieted are the signals whose default action in a Go program ends it.
// The init catches them with a handler that does nothing (quietSignals)
// before it forks the program, so that a process of the block that signals
// PID 1 achieves nothing, as with any init without handlers, and the
// program (whose exec resets caught signals) inherits none of it. The init
// forwards nothing: codellm sends its SIGTERM to the program itself (it
// finds it by the PID the init reports with Started). The init used to
// subscribe to these with os/signal and relay them: a thread, a goroutine
// and a round trip to the runtime's signal thread per signal, about a
// millisecond of CPU and of latency per block (BENCHMARKS.md).
var quieted = [...]syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT,
	syscall.SIGABRT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGPIPE, syscall.SIGALRM,
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
// goroutine on it during package initialisation), except, with Spec.Hold,
// the kill(2) of the namespace on HoldSignal from another runtime thread.
// The seccomp filter (installed with TSYNC), no_new_privs and the empty
// capability sets cover every thread of the init (onThreads); the Landlock
// domain only this one (see restrictLandlock).
//
// It reaps every process that is orphaned into it; as soon as the program
// is reaped it kills and reaps whatever else is left in the namespace
// (endRest), writes the program's wait status on the status pipe
// ([WaitRecord]) and exits. A PID-namespace init cannot die of a signal
// it raises itself, so its exit code alone could not carry "killed by
// SIGABRT". With Spec.Hold it does not exit but holds (see hold). It never
// returns.
func runInit(sp *Spec) {
	// Before the program exists, so that nothing it sends is missed.
	quiet := quieted[:]
	if sp.Hold {
		// The goroutine starts (and parks) before the fork, so that none is
		// made, and no runtime thread started for it, once the program runs.
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, HoldSignal)
		go endNamespaceOn(sigs)
		quiet = except(quiet, HoldSignal)
	}
	if err := quietSignals(quiet); err != nil {
		fail(MHelper, "init: ", err)
	}
	pid := startProgram(sp)
	ws := reap(pid)
	endRest()
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
	if _, err := syscall.Write(StatusFD, StartedRecord(pid)); err != nil {
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

func except(sigs []syscall.Signal, drop syscall.Signal) []syscall.Signal {
	var out []syscall.Signal
	for _, s := range sigs {
		if s != drop {
			out = append(out, s)
		}
	}
	return out
}

// endNamespaceOn kills every other process of the namespace on each
// HoldSignal (kill(2) of -1 by a namespace's init spares only the init).
func endNamespaceOn(sigs <-chan os.Signal) {
	for range sigs {
		_ = syscall.Kill(-1, syscall.SIGKILL)
	}
}

// hold, once endRest has ended whatever the program left in the namespace
// so that nothing can change the workdir any more, reports the program's
// wait status and waits, holding the namespace and its private mounts for
// the server to read through /proc/<init>/root, until the server kills it
// (or dies: the helper's parent-death signal).
func hold(ws syscall.WaitStatus) {
	_, _ = syscall.Write(StatusFD, WaitRecord(uint32(ws)))
	for {
		// No descriptors, no timeout: sleeps until a signal, never returns
		// otherwise.
		_, _ = syscall.Select(0, nil, nil, nil, nil)
	}
}

// endRest kills every other process of the namespace (kill(2) of -1 by a
// namespace's init spares only the init: daemons, a background job still
// writing) and reaps them all, so that once the init reports the program's
// wait status nothing of the block runs any more: codellm answers then,
// while the init's own exit (its address space, the block's mounts and
// namespaces, a few milliseconds) goes on behind the reply.
func endRest() {
	_ = syscall.Kill(-1, syscall.SIGKILL)
	for {
		var st syscall.WaitStatus
		_, err := syscall.Wait4(-1, &st, 0, nil)
		if err != nil && err != syscall.EINTR {
			return // ECHILD: the namespace holds only the init
		}
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
