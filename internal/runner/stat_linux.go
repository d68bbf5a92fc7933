package runner

import (
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// noFollow refuses a symlink as the last path component when reading files out.
const noFollow = syscall.O_NOFOLLOW

// fileID identifies a file's content version well enough to tell "changed by the run": a rewrite changes
// ctime even when size and mtime are restored.
type fileID struct {
	dev, ino    uint64
	size        int64
	mtime, ctim int64
	mode        fs.FileMode
}

func statID(info fs.FileInfo) fileID {
	id := fileID{size: info.Size(), mtime: info.ModTime().UnixNano(), mode: info.Mode()}
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		id.dev, id.ino = uint64(st.Dev), st.Ino
		id.ctim = st.Ctim.Nano()
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
