package pipeline

import (
	"bytes"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// pfExiting is the kernel's PF_EXITING task flag: set at the very start of exit, before the task's
// descriptors are closed.
const pfExiting = 0x4

// processEnded reports whether pid is exiting, a zombie or gone. A block whose process is past that point
// has closed (or is closing) its pipes of its own accord: nothing done to its pipes afterwards caused its
// exit. A pid /proc does not show counts as ended, which fails closed: on a /proc mounted with
// hidepid (where codellm cannot see the sandbox uid's processes) an upstream's non-zero exit after its
// reader finished is reported as failed rather than excused.
func processEnded(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// Fields after the command (which may itself contain ") "): state ppid pgrp session tty tpgid flags.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 7 {
		return false
	}
	if st := f[0]; len(st) == 1 && (st[0] == 'Z' || st[0] == 'X' || st[0] == 'x') {
		return true
	}
	flags, err := strconv.ParseUint(string(f[6]), 10, 64)
	return err == nil && flags&pfExiting != 0
}

// growPipe asks the kernel for a pipe buffer of at least size bytes, best effort (the kernel caps it at
// /proc/sys/fs/pipe-max-size, and an unprivileged user over pipe-user-pages-soft keeps the default).
// Used for the pipe codellm itself reads the last stdout from: every refill of that pipe is a wakeup of a
// sandboxed writer, which costs far more than the copy, so a buffer the size of the cap lets a block
// write its whole captured output in one go.
func growPipe(f *os.File, size int) {
	_, _ = unix.FcntlInt(f.Fd(), unix.F_SETPIPE_SZ, size)
}
