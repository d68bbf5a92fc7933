//go:build !linux

package runner

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

const noFollow = 0

// fileID identifies a file's content version (portable fallback: no inode or ctime).
type fileID struct {
	size  int64
	mtime int64
	mode  fs.FileMode
	name  string
}

func statID(info fs.FileInfo) fileID {
	return fileID{size: info.Size(), mtime: info.ModTime().UnixNano(), mode: info.Mode()}
}

func dirID(dir string) (fileID, error) {
	info, err := os.Lstat(dir)
	if err != nil {
		return fileID{}, err
	}
	if !info.IsDir() {
		return fileID{}, fmt.Errorf("%s is not a directory", dir)
	}
	return fileID{name: dir}, nil
}

// linkFrom is not available here: the file is copied instead.
func linkFrom(root *os.Root, name, to string) error { return errors.ErrUnsupported }
