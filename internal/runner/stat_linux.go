package runner

import (
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// noFollow refuses a symlink as the last path component when reading files out.
const noFollow = syscall.O_NOFOLLOW

// fileID identifies a file's content version well enough to tell "changed by the run": a replaced file
// has a new inode, a written one a new mtime (nanoseconds). ctime is deliberately not part of it: the
// sandbox chowns the workspace to its unprivileged uid before every run, which changes every file's
// ctime without changing any content. A run that rewrites a file and restores its size and mtime
// (utimensat) is not reported; that takes intent, and files out is a convenience, not an audit.
type fileID struct {
	dev, ino uint64
	size     int64
	mtime    int64
	mode     fs.FileMode
}

func statID(info fs.FileInfo) fileID {
	id := fileID{size: info.Size(), mtime: info.ModTime().UnixNano(), mode: info.Mode()}
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		id.dev, id.ino = uint64(st.Dev), st.Ino
	}
	return id
}

// dirID identifies a workspace directory (device and inode), refusing anything but a real directory.
func dirID(dir string) (fileID, error) {
	info, err := os.Lstat(dir)
	if err != nil {
		return fileID{}, err
	}
	if !info.IsDir() {
		return fileID{}, fmt.Errorf("%s is not a directory", dir)
	}
	id := statID(info)
	return fileID{dev: id.dev, ino: id.ino}, nil
}

// linkFrom hard-links name, opened inside root (never through a symlink), at the path to.
func linkFrom(root *os.Root, name, to string) error {
	f, err := root.OpenFile(name, os.O_RDONLY|noFollow, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(int(f.Fd())), unix.AT_FDCWD, to, unix.AT_SYMLINK_FOLLOW)
}
