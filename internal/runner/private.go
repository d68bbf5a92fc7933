package runner

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// The bounded private workspace (a runner without a mounted WorkspaceSize tmpfs: a non-root server, or a
// root one whose mount is refused). The host workspace directory is never bind-mounted: the sandbox copies
// it into a private tmpfs of WorkspaceSize bytes (Persist false; writes beyond get ENOSPC inside), and when
// the program is over, with its namespace emptied but held, a collector reads that tmpfs through an
// os.Root of /proc/<init>/root/<WorkDir> (sandbox.Spec.Collect): files out are compared there against the
// host directory's state before the run, and a session (or a compile stage, whose build products the run
// stage needs) has the tree copied back into a fresh sibling directory that then replaces the host one.
// Symlinks are copied as links and never followed: the collect root resolves absolute links against the
// server's own root.

// collector is one stage's Spec.Collect and what it found. Its fields are read after Supervise returns
// (the collect happens before the process is reaped).
type collector struct {
	host     string // the host workspace: the state before the run
	keep     bool   // copy the tree back into host (sessions, the compile stage)
	list     bool   // list files out
	maxCount int
	maxBytes int64 // content cap per file out
	bound    int64 // WorkspaceSize: the tree is refused beyond it
	entries  int   // at most this many entries are copied back

	ran       bool
	err       error
	same      map[string]bool // regular files found unchanged (sameFile), linked rather than copied back
	buf       []byte          // sameFile's buffers
	files     []OutFile
	omitted   int
	truncated bool
}

// treeEntry is one entry of the collected tree, in walk order (a directory before what it holds).
type treeEntry struct {
	name string
	mode fs.FileMode
	size int64
}

// errTreeTooLarge refuses a tree that exceeds the workspace bound (the tmpfs bounds it already: this is
// the second line).
var errTreeTooLarge = errors.New("the workspace exceeds its bound")

func (c *collector) collect(root string) error {
	c.ran = true
	src, err := os.OpenRoot(root)
	if err != nil {
		return err
	}
	defer src.Close()
	limit := maxScanEntries
	var modes map[string]fs.FileMode
	if c.keep {
		limit = max(limit, c.entries)
		if modes, err = ownerAccess(src, limit); err != nil {
			return err
		}
	}
	tree, complete, err := walkTree(src, limit, c.keep)
	if err != nil {
		return err
	}
	for i, e := range tree {
		if m, ok := modes[e.name]; ok {
			tree[i].mode = m // as the run left it: what the session keeps
		}
	}
	if c.list {
		if err := c.listFiles(src, tree, complete); err != nil {
			return err
		}
	}
	if !c.keep {
		return nil
	}
	if !complete {
		return fmt.Errorf("%w: more than %d entries", errTreeTooLarge, c.entries)
	}
	return c.copyBack(src, tree)
}

// ownerAccess gives the collector back the access to the run's tree that the run took away from it
// (chmod 000 on a file or a directory), so that a tree to keep is collected whole: as a non-root server
// the collector is the files' owner without CAP_DAC_OVERRIDE, and one unreadable file made the execute
// 500 and dropped every change of it (issue 35 item 15). The tmpfs is the run's and goes with it; the
// modes the run left are returned (by name, "." included) for the copy back. It visits at most limit
// entries (the walk after it says whether the tree is complete).
func ownerAccess(src *os.Root, limit int) (map[string]fs.FileMode, error) {
	modes := map[string]fs.FileMode{}
	grant := func(name string, need fs.FileMode) error {
		st, err := src.Lstat(name)
		if err != nil || st.Mode()&fs.ModeSymlink != 0 || st.Mode().Perm()&need == need {
			return err
		}
		modes[name] = st.Mode()
		return src.Chmod(name, st.Mode().Perm()|need)
	}
	seen := 0
	var visit func(dir string) error
	visit = func(dir string) error {
		if err := grant(dir, 0o700); err != nil {
			return err
		}
		f, err := src.Open(dir)
		if err != nil {
			return err
		}
		ents, err := f.ReadDir(-1)
		f.Close()
		if err != nil {
			return err
		}
		for _, e := range ents {
			if seen++; seen > limit {
				return nil
			}
			name := path.Join(dir, e.Name())
			switch {
			case e.IsDir():
				err = visit(name)
			case e.Type().IsRegular():
				err = grant(name, 0o600)
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	return modes, visit(".")
}

// walkTree lists the tree without following symlinks, up to limit entries (complete false beyond). An
// unreadable directory (chmod 000 by the run) is skipped, or an error when strict (a tree to keep must be
// whole).
func walkTree(src *os.Root, limit int, strict bool) (tree []treeEntry, complete bool, err error) {
	err = fs.WalkDir(src.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			if !strict && errors.Is(err, fs.ErrPermission) && name != "." {
				return fs.SkipDir
			}
			return err
		}
		if name == "." {
			return nil
		}
		if len(tree) >= limit {
			return errTooManyEntries
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		tree = append(tree, treeEntry{name: name, mode: info.Mode(), size: info.Size()})
		return nil
	})
	if errors.Is(err, errTooManyEntries) {
		return tree, false, nil
	}
	return tree, err == nil, err
}

// listFiles fills files out: the regular files outside scratch that are new or differ from the host's.
func (c *collector) listFiles(src *os.Root, tree []treeEntry, complete bool) error {
	if !complete || len(tree) > maxScanEntries {
		c.truncated = true // as with a host workspace: too many entries to say what changed
		return nil
	}
	before, err := os.OpenRoot(c.host)
	if err != nil {
		return err
	}
	defer before.Close()
	var names []string
	sizes := map[string]int64{}
	for _, e := range tree {
		if !e.mode.IsRegular() || isScratch(e.name) {
			continue
		}
		same, err := c.unchanged(before, src, e)
		if err != nil {
			return err
		}
		if !same {
			names = append(names, e.name)
			sizes[e.name] = e.size
		}
	}
	sort.Strings(names)
	for _, name := range names {
		if len(c.files) >= c.maxCount {
			c.omitted++
			continue
		}
		of, err := outFile(src, name, sizes[name], c.maxBytes)
		if err != nil {
			return err
		}
		c.files = append(c.files, of)
	}
	c.truncated = c.omitted > 0
	return nil
}

// unchanged is sameFile, remembered for the copy back.
func (c *collector) unchanged(before, src *os.Root, e treeEntry) (bool, error) {
	if v, ok := c.same[e.name]; ok {
		return v, nil
	}
	if c.buf == nil {
		c.buf = make([]byte, 2*compareChunk)
	}
	same, err := sameFile(before, src, e, c.buf)
	if err != nil {
		return false, err
	}
	if c.same == nil {
		c.same = map[string]bool{}
	}
	c.same[e.name] = same
	return same, nil
}

// isScratch is what files out never lists: tmp/, Python's bytecode caches.
func isScratch(name string) bool {
	if name == scratchDir || strings.HasPrefix(name, scratchDir+"/") || strings.HasSuffix(name, ".pyc") {
		return true
	}
	for _, part := range strings.Split(path.Dir(name), "/") {
		if part == "__pycache__" {
			return true
		}
	}
	return false
}

// compareChunk is how much of each file sameFile reads at a time.
const compareChunk = 64 << 10

// sameFile reports whether before holds a regular file name of the same size, permissions and content
// as src's (e); buf (2*compareChunk bytes) holds the chunks compared.
func sameFile(before, src *os.Root, e treeEntry, buf []byte) (bool, error) {
	name := e.name
	st, err := before.Lstat(name)
	if err != nil || !st.Mode().IsRegular() || st.Size() != e.size || st.Mode().Perm() != e.mode.Perm() {
		return false, nil
	}
	if e.size == 0 {
		return true, nil
	}
	a, err := before.OpenFile(name, os.O_RDONLY|noFollow, 0)
	if err != nil {
		return false, nil
	}
	defer a.Close()
	b, err := src.OpenFile(name, os.O_RDONLY|noFollow, 0)
	if err != nil {
		return false, nil // unreadable (chmod 000 by the run): changed, as far as anyone can tell
	}
	defer b.Close()
	ba, bb := buf[:compareChunk], buf[compareChunk:2*compareChunk]
	for {
		na, ea := io.ReadFull(a, ba)
		nb, eb := io.ReadFull(b, bb)
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			return false, nil
		}
		if ea != nil || eb != nil {
			return ea == eb || (isEOF(ea) && isEOF(eb)), nil
		}
	}
}

func isEOF(err error) bool { return err == io.EOF || err == io.ErrUnexpectedEOF }

// outFile is one file out, with its content when it is at most maxBytes.
func outFile(src *os.Root, name string, size, maxBytes int64) (OutFile, error) {
	of := OutFile{Name: name, Size: size}
	if size > maxBytes {
		of.ContentOmitted = true
		return of, nil
	}
	data, err := readCapped(src, name, maxBytes)
	if errors.Is(err, fs.ErrPermission) {
		of.ContentOmitted = true // the run made it unreadable: listed, without content
		return of, nil
	}
	if err != nil {
		return of, err
	}
	setContent(&of, data)
	return of, nil
}

// copyBack copies the tree into a fresh sibling of the host directory and swaps it in: on any failure
// the host directory is left as it was.
func (c *collector) copyBack(src *os.Root, tree []treeEntry) error {
	var total int64
	for _, e := range tree {
		if e.mode.IsRegular() {
			total += e.size
		}
	}
	if total > c.bound {
		return fmt.Errorf("%w: %d bytes of files, the bound is %d", errTreeTooLarge, total, c.bound)
	}
	next, old := c.host+".next", c.host+".old"
	_ = os.RemoveAll(next)
	if err := os.Mkdir(next, 0o700); err != nil {
		return err
	}
	if err := c.copyEntries(src, next, tree); err != nil {
		os.RemoveAll(next)
		return err
	}
	if err := os.Rename(c.host, old); err != nil {
		os.RemoveAll(next)
		return err
	}
	if err := os.Rename(next, c.host); err != nil {
		_ = os.Rename(old, c.host)
		os.RemoveAll(next)
		return err
	}
	return os.RemoveAll(old)
}

// copyEntries recreates tree (from src) under dst: directories, regular files with their permission
// bits, symlinks as links; other types are left out, as the sandbox's copy-in does. A file identical to
// the host's is hard-linked from there instead of copied (the old directory goes after the swap).
func (c *collector) copyEntries(src *os.Root, dst string, tree []treeEntry) error {
	before, err := os.OpenRoot(c.host)
	if err != nil {
		return err
	}
	defer before.Close()
	for _, e := range tree {
		if e.mode.IsRegular() {
			if same, err := c.unchanged(before, src, e); err != nil {
				return err
			} else if same && linkFrom(before, e.name, filepath.Join(dst, filepath.FromSlash(e.name))) == nil {
				continue
			}
		}
		to := filepath.Join(dst, filepath.FromSlash(e.name))
		switch {
		case e.mode.IsDir():
			if err := os.Mkdir(to, e.mode.Perm()|0o700); err != nil {
				return err
			}
		case e.mode.IsRegular():
			if err := copyOut(src, e.name, to, e.mode.Perm()); err != nil {
				return err
			}
		case e.mode&fs.ModeSymlink != 0:
			target, err := src.Readlink(e.name)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, to); err != nil {
				return err
			}
		}
	}
	return nil
}

func copyOut(src *os.Root, name, to string, perm fs.FileMode) error {
	in, err := src.OpenFile(name, os.O_RDONLY|noFollow, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	if st, err := in.Stat(); err != nil || !st.Mode().IsRegular() {
		return fmt.Errorf("%s is no longer a regular file", name)
	}
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL|noFollow, perm|0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// tmpfsPage is the unit a tmpfs charges file data in.
const tmpfsPage = 4096

// checkFits refuses (413), before anything is written, request files that would not fit in the private
// workspace together with what the host copy already holds: the sandbox's copy-in would fail, with the
// files already written to the host, and every later execute of the session the same way. The estimate
// is an upper bound of what the tmpfs charges: file data in whole pages, a page per symlink, an inode
// per entry.
func checkFits(dir string, files []decodedFile, bound int64) *Error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil // writeFiles reports it
	}
	defer root.Close()
	replaced := map[string]bool{}
	var used, inodes int64 = 0, 1
	for _, f := range files {
		replaced[f.name] = true
		used += pages(int64(len(f.data)))
		inodes++
		for d := path.Dir(f.name); d != "."; d = path.Dir(d) {
			if _, err := root.Lstat(d); err != nil && !replaced[d] {
				replaced[d] = true
				inodes++
			}
		}
	}
	err = fs.WalkDir(root.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || name == "." || replaced[name] {
			return err
		}
		inodes++
		switch info, err := d.Info(); {
		case err != nil:
			return err
		case info.Mode().IsRegular():
			used += pages(info.Size())
		case info.Mode()&fs.ModeSymlink != 0:
			used += tmpfsPage
		}
		return nil
	})
	if err == nil && (used > bound || inodes > int64(max(bound/tmpfsPage, 4096))) {
		return &Error{Status: http.StatusRequestEntityTooLarge, Kind: ErrTooLarge, Message: fmt.Sprintf(
			"the workspace with the request's files would need %d bytes and %d inodes; its bound is %d bytes (--runner-workspace-size); nothing was written",
			used, inodes, bound)}
	}
	return nil
}

func pages(n int64) int64 { return (n + tmpfsPage - 1) / tmpfsPage * tmpfsPage }
