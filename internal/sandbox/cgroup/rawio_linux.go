package cgroup

import (
	"io/fs"

	"golang.org/x/sys/unix"
)

// The kernel interface files and directories of cgroupfs are read with
// plain open/read/close (and getdents) instead of os.ReadFile and
// os.ReadDir: kernfs files are pollable, so the os package registers every
// one of them with the runtime's epoll set and removes it again (two more
// syscalls and the poller's locks per file), and a run's teardown reads
// dozens of them on the request path. The results are the same bytes.

// readSmall reads a whole cgroup interface file (they are a few bytes to a
// few KiB; cgroup.procs of a busy group may be longer and is read to EOF).
func readSmall(path string) ([]byte, error) {
	fd, err := openRetry(path, unix.O_RDONLY|unix.O_CLOEXEC)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	buf := make([]byte, 0, 512)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

func openRetry(path string, flags int) (int, error) {
	for {
		fd, err := unix.Open(path, flags, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// subdirs lists the names of the directories directly inside dir.
func subdirs(dir string) ([]string, error) {
	fd, err := openRetry(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	var out []string
	buf := make([]byte, 4096)
	for {
		n, err := unix.ReadDirent(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "getdents", Path: dir, Err: err}
		}
		if n == 0 {
			return out, nil
		}
		for b := buf[:n]; len(b) > 0; {
			// struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name.
			reclen := int(b[16]) | int(b[17])<<8
			if reclen < 19 || reclen > len(b) {
				return nil, &fs.PathError{Op: "getdents", Path: dir, Err: unix.EINVAL}
			}
			if b[18] == unix.DT_DIR {
				name := b[19:reclen]
				for i, c := range name {
					if c == 0 {
						name = name[:i]
						break
					}
				}
				if s := string(name); s != "." && s != ".." {
					out = append(out, s)
				}
			}
			b = b[reclen:]
		}
	}
}
