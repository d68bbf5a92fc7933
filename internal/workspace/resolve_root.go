package workspace

import (
	"os"
	"strings"
	"syscall"
)

// rootResolver confines paths with os.Root: the portable mechanism, used where openat2 is unavailable (other
// systems, Linux before 5.6). os.Root never leaves the root but follows in-root symlinks, so the no-symlink
// rules are enforced by checking each component with Lstat and comparing identities after opening.
type rootResolver struct {
	root *os.Root
	real string
}

func newRootResolver(real string) (*rootResolver, error) {
	r, err := os.OpenRoot(real)
	if err != nil {
		return nil, err
	}
	return &rootResolver{root: r, real: real}, nil
}

// workDir is the realpath: os.Root does not expose its descriptor. Candidates are re-resolved through the root
// anyway, so a swapped directory can only hide names, never expose outside files.
func (r *rootResolver) workDir() string { return r.real }

func (r *rootResolver) close() error { return r.root.Close() }

func (r *rootResolver) rootID() (fileID, error) {
	fi, err := r.root.Stat(".")
	if err != nil {
		return fileID{}, err
	}
	return infoOf(fi).id, nil
}

// checkComponents refuses symlinks in every component of rel (the last one included when all is set).
func (r *rootResolver) checkComponents(rel string, all bool) (statInfo, error) {
	if rel == "" {
		fi, err := r.root.Lstat(".")
		if err != nil {
			return statInfo{}, err
		}
		return infoOf(fi), nil
	}
	segs := strings.Split(rel, "/")
	var last statInfo
	for i := range segs {
		if i == len(segs)-1 && !all {
			break
		}
		fi, err := r.root.Lstat(strings.Join(segs[:i+1], "/"))
		if err != nil {
			return statInfo{}, err
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			return statInfo{}, syscall.ELOOP
		}
		if i < len(segs)-1 && !fi.IsDir() {
			return statInfo{}, syscall.ENOTDIR
		}
		last = infoOf(fi)
	}
	return last, nil
}

func (r *rootResolver) openFile(rel string, noSymlinks bool) (*os.File, error) {
	if noSymlinks {
		if _, err := r.checkComponents(rel, false); err != nil {
			return nil, err
		}
	}
	// The final component must not be a symlink, and must not be something whose open could block (a FIFO):
	// without O_NONBLOCK in package os, refuse non-regular files before opening.
	fi, err := r.root.Lstat(rel)
	if err != nil {
		return nil, err
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		return nil, syscall.ELOOP
	}
	if !fi.Mode().IsRegular() && !fi.IsDir() {
		return nil, syscall.EINVAL
	}
	f, err := r.root.OpenFile(rel, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	got, err := fstatFile(f)
	if err != nil || got.id != infoOf(fi).id {
		f.Close()
		return nil, syscall.EAGAIN
	}
	return f, nil
}

func (r *rootResolver) stat(rel string) (statInfo, error) {
	return r.checkComponents(rel, true)
}

func (r *rootResolver) openDir(rel string) (dirHandle, error) {
	want, err := r.checkComponents(rel, true)
	if err != nil {
		return nil, err
	}
	if !want.mode.IsDir() {
		return nil, syscall.ENOTDIR
	}
	name := rel
	if name == "" {
		name = "."
	}
	sub, err := r.root.OpenRoot(name)
	if err != nil {
		return nil, err
	}
	d := &rootDir{root: sub}
	if got, err := d.id(); err != nil || got != want.id {
		sub.Close()
		return nil, syscall.EAGAIN
	}
	return d, nil
}

type rootDir struct{ root *os.Root }

func (d *rootDir) id() (fileID, error) {
	fi, err := d.root.Stat(".")
	if err != nil {
		return fileID{}, err
	}
	return infoOf(fi).id, nil
}

func (d *rootDir) lstat(name string) (statInfo, error) {
	fi, err := d.root.Lstat(name)
	if err != nil {
		return statInfo{}, err
	}
	return infoOf(fi), nil
}

func (d *rootDir) createExcl(name string) (*os.File, error) {
	return d.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
}

func (d *rootDir) openNoFollow(name string) (*os.File, error) {
	fi, err := d.root.Lstat(name)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, syscall.ELOOP
	}
	f, err := d.root.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	if got, err := fstatFile(f); err != nil || got.id != infoOf(fi).id {
		f.Close()
		return nil, syscall.EAGAIN
	}
	return f, nil
}

func (d *rootDir) rename(oldName, newName string) error { return d.root.Rename(oldName, newName) }
func (d *rootDir) link(oldName, newName string) error   { return d.root.Link(oldName, newName) }
func (d *rootDir) remove(name string) error             { return d.root.Remove(name) }
func (d *rootDir) close() error                         { return d.root.Close() }

func (d *rootDir) sync() error {
	f, err := d.root.Open(".")
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
