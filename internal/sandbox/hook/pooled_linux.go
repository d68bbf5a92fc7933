//go:build linux

package hook

import "syscall"

// prepared is the root a pre-started helper built before its block
// existed (prebuild); nil otherwise.
var prepared *preparedRoot

// prebuild reads the spec the server sent a pre-started helper at its
// start — length-prefixed (4 bytes, little endian), empty for none — made
// for no block in particular, and builds the parts of the private root
// that are the same for every block (prepareRoot), then switches into it
// (enterPrepared). The block's own spec follows later; finishRoot adds its
// workdir and makes the root read-only.
func prebuild() error {
	var n [4]byte
	if err := readFull(SpecFD, n[:]); err != nil {
		return wrap("read the pre-start spec", err)
	}
	size := int(n[0]) | int(n[1])<<8 | int(n[2])<<16 | int(n[3])<<24
	if size == 0 {
		return nil
	}
	if size > maxSpec {
		return &herr{"pre-start spec larger than " + itoa(int64(maxSpec)) + " bytes", nil}
	}
	raw := make([]byte, size)
	if err := readFull(SpecFD, raw); err != nil {
		return wrap("read the pre-start spec", err)
	}
	pre, err := Decode(raw)
	if err != nil {
		return &herr{"malformed pre-start spec", err}
	}
	if pre.Mech&MRootFS == 0 {
		return nil
	}
	pr, err := prepareRoot(pre)
	if err == nil {
		err = enterPrepared(pr)
	}
	if err != nil {
		pr.trees.close()
		return err
	}
	prepared = pr
	return nil
}

// readFull reads exactly len(b) bytes; EOF before any is the server
// draining its pool (see receiveStdio).
func readFull(fd int, b []byte) error {
	for got := 0; got < len(b); {
		n, err := syscall.Read(fd, b[got:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			if got == 0 {
				syscall.Exit(0)
			}
			return syscall.EPIPE
		}
		got += n
	}
	return nil
}

// pooled reports whether this helper was started ahead of need (see
// EnvPooled): its SpecFD is then a Unix socket, and its stdio and DirFD
// are /dev/null until the block's own arrive.
func pooled() bool {
	v, ok := syscall.Getenv(EnvPooled)
	return ok && v == "1"
}

// receiveStdio waits for the block a pre-started helper is handed: one
// message on SpecFD whose SCM_RIGHTS carry the block's stdin, stdout,
// stderr and workdir, which replace descriptors 0, 1, 2 and DirFD. The
// spec follows on the same socket. A socket closed before any message is
// the server draining its pool: the helper exits without a word, having
// done nothing.
func receiveStdio() error {
	var b [1]byte
	oob := make([]byte, syscall.CmsgSpace(4*4))
	var n, oobn, flags int
	var err error
	for {
		n, oobn, flags, _, err = syscall.Recvmsg(SpecFD, b[:], oob, syscall.MSG_CMSG_CLOEXEC)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		return wrap("receive the block's descriptors", err)
	}
	if n == 0 && oobn == 0 {
		syscall.Exit(0)
	}
	if flags&syscall.MSG_CTRUNC != 0 {
		return &herr{"receive the block's descriptors: control message truncated", nil}
	}
	msgs, err := syscall.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return &herr{"receive the block's descriptors: no descriptors", err}
	}
	fds, err := syscall.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 4 {
		for _, fd := range fds {
			syscall.Close(fd)
		}
		return &herr{"receive the block's descriptors: want 4, got " + itoa(int64(len(fds))), err}
	}
	for i, to := range [4]int{0, 1, 2, DirFD} {
		fl := 0
		if to == DirFD {
			fl = syscall.O_CLOEXEC // the program never gets the workdir descriptor
		}
		if err := syscall.Dup3(fds[i], to, fl); err != nil {
			return wrap("install the block's descriptor "+itoa(int64(to)), err)
		}
		syscall.Close(fds[i])
	}
	return nil
}
