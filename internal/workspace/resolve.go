package workspace

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"syscall"
)

// fileID is a file's identity: what "the same file" means when a path is re-checked after a race window.
type fileID struct{ dev, ino uint64 }

// statInfo is the part of an lstat/fstat result the tools need.
type statInfo struct {
	id       fileID
	mode     fs.FileMode
	size     int64
	uid, gid int
	nlink    uint64 // 0 where the platform does not say
}

// resolver opens paths beneath the registered root and nowhere else. rel is always a normalised portable path
// ("" = the root).
type resolver interface {
	// openFile opens rel read-only, never following a symlink in the final component and never leaving the
	// root; with noSymlinks no component may be a symlink at all (the rule for anything that writes).
	openFile(rel string, noSymlinks bool) (*os.File, error)
	// stat describes rel without following any symlink in any component.
	stat(rel string) (statInfo, error)
	// openDir opens the directory rel for *at operations, never following any symlink.
	openDir(rel string) (dirHandle, error)
	// rootID is the identity of the descriptor opened at registration.
	rootID() (fileID, error)
	// workDir is a path that names the registered root directory for a child process's chdir: where
	// possible the root descriptor itself (/proc/self/fd/N), so that a root swapped after the last check cannot
	// redirect the enumerator.
	workDir() string
	close() error
}

// dirHandle performs single-component operations inside one already-opened directory, so that a concurrent
// rename of a parent between check and use cannot redirect them.
type dirHandle interface {
	id() (fileID, error)
	lstat(name string) (statInfo, error)
	createExcl(name string) (*os.File, error) // O_WRONLY|O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600
	openNoFollow(name string) (*os.File, error)
	rename(oldName, newName string) error
	link(oldName, newName string) error
	remove(name string) error
	sync() error
	close() error
}

func infoOf(fi fs.FileInfo) statInfo {
	si := statInfo{mode: fi.Mode(), size: fi.Size(), uid: -1, gid: -1}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		si.id = fileID{dev: uint64(st.Dev), ino: uint64(st.Ino)} //nolint:unconvert // widths differ per platform
		si.uid, si.gid = int(st.Uid), int(st.Gid)
		si.nlink = uint64(st.Nlink) //nolint:unconvert // widths differ per platform
	}
	return si
}

func fstatFile(f *os.File) (statInfo, error) {
	fi, err := f.Stat()
	if err != nil {
		return statInfo{}, err
	}
	return infoOf(fi), nil
}

// splitParent splits a normalised, non-root path into its parent ("" = root) and final name.
func splitParent(rel string) (string, string) {
	i := strings.LastIndexByte(rel, '/')
	if i < 0 {
		return "", rel
	}
	return rel[:i], rel[i+1:]
}

// pathError maps a resolver failure to INVALID_PATH with a message naming only the caller's relative path.
// Anything that is not a recognisable path problem keeps fallback, so that storage faults are not mistaken for
// bad requests.
func pathError(err error, rel string, fallback Code) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	p := displayPath(rel)
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		if errors.Is(err, fs.ErrNotExist) {
			return newErr(CodeInvalidPath, "path does not exist: "+p)
		}
		return newErr(fallback, "cannot access "+p)
	}
	switch errno {
	case syscall.ENOENT:
		return newErr(CodeInvalidPath, "path does not exist: "+p)
	case syscall.ELOOP, syscall.EMLINK:
		return newErr(CodeInvalidPath, "path is or passes through a symlink, which is not allowed here: "+p)
	case syscall.EXDEV:
		return newErr(CodeInvalidPath, "path resolves outside the workspace root: "+p)
	case syscall.ENOTDIR:
		return newErr(CodeInvalidPath, "a parent of the path is not a directory: "+p)
	case syscall.EISDIR:
		return newErr(CodeInvalidPath, "path is a directory: "+p)
	case syscall.ENAMETOOLONG:
		return newErr(CodeInvalidPath, "path is too long: "+p)
	case syscall.EACCES, syscall.EPERM:
		return newErr(CodeInvalidPath, "permission denied: "+p)
	case syscall.EINVAL:
		return newErr(CodeInvalidPath, "path is not a regular file: "+p)
	case syscall.EAGAIN:
		return newErr(CodeInvalidPath, "path kept changing during resolution: "+p)
	}
	return newErr(fallback, "cannot access "+p+": "+errno.Error())
}

// errnoText describes an I/O error without any path it may carry.
func errnoText(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Op + ": " + pe.Err.Error()
	}
	return "I/O error"
}
