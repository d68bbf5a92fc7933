package runner

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
)

// scratchDir is the workspace subdirectory TMPDIR points at. It is scratch: never listed in files out
// and never writable by a request's files.
const scratchDir = "tmp"

// OutFile is a file the run created or changed in its workspace.
type OutFile struct {
	Name           string  `json:"name"` // slash-separated, relative to the workspace
	Size           int64   `json:"size"`
	Encoding       string  `json:"encoding,omitempty"` // "base64" when Content is present
	Content        *string `json:"content,omitempty"`
	ContentOmitted bool    `json:"content_omitted,omitempty"` // larger than the content cap
}

var errTooManyEntries = errors.New("workspace has too many entries to scan")

// writeFiles puts the request's files into the workspace through an os.Root, so nothing a previous run
// left there (symlinks, directories) can redirect a write outside it. It refuses, before writing anything,
// a name whose parent is not a directory or that names an existing directory (400); an I/O failure
// afterwards is returned as is (the workspace is then partially written).
func writeFiles(dir string, files []decodedFile) (*Error, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	for i, f := range files {
		for p := path.Dir(f.name); p != "."; p = path.Dir(p) {
			st, err := root.Lstat(p)
			if err == nil && !st.IsDir() {
				return badRequest(fmt.Sprintf("files[%d]: %q exists in the workspace and is not a directory", i, p)), nil
			}
		}
		if st, err := root.Lstat(f.name); err == nil && st.IsDir() {
			return badRequest(fmt.Sprintf("files[%d]: %q is a directory in the workspace", i, f.name)), nil
		}
	}
	if err := root.MkdirAll(scratchDir, 0o700); err != nil {
		return nil, err
	}
	for _, f := range files {
		if d := path.Dir(f.name); d != "." {
			if err := root.MkdirAll(d, 0o755); err != nil {
				return nil, err
			}
		}
		// Replace rather than overwrite: a symlink left by an earlier run is removed, not followed.
		if err := root.Remove(f.name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		w, err := root.OpenFile(f.name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return nil, err
		}
		_, err = w.Write(f.data)
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, err
		}
	}
	return nil, nil
}

// snapshot maps each regular file of a workspace (outside tmp/) to its identity.
type snapshot map[string]fileID

// scan walks the workspace without following symlinks. It stops with errTooManyEntries after
// maxScanEntries entries, so a run that creates a million files costs a bounded walk.
func scan(root *os.Root) (snapshot, error) {
	snap := snapshot{}
	n := 0
	err := fs.WalkDir(root.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrPermission) && name != "." {
				// A directory the run made unreadable (chmod 000) when codellm is not root: its files
				// are not listed, which is the run's own doing, not a workspace failure.
				return fs.SkipDir
			}
			return err
		}
		if n++; n > maxScanEntries {
			return errTooManyEntries
		}
		if d.IsDir() && (name == scratchDir || d.Name() == "__pycache__") {
			return fs.SkipDir // scratch, and Python's bytecode cache: interpreter byproducts, never files out
		}
		if !d.Type().IsRegular() || strings.HasSuffix(name, ".pyc") {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		snap[name] = statID(info)
		return nil
	})
	return snap, err
}

// filesOut lists the regular files that are new or changed since before, sorted by name: at most
// maxCount, each with its content when it is at most maxBytes. omitted counts the changed files left out.
func filesOut(root *os.Root, before, after snapshot, maxCount int, maxBytes int64) (out []OutFile, omitted int, err error) {
	var names []string
	for name, id := range after {
		if old, ok := before[name]; !ok || old != id {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		if len(out) >= maxCount {
			omitted++
			continue
		}
		of := OutFile{Name: name, Size: after[name].size}
		if of.Size > maxBytes {
			of.ContentOmitted = true
			out = append(out, of)
			continue
		}
		data, err := readCapped(root, name, maxBytes)
		if err != nil {
			return nil, 0, err
		}
		setContent(&of, data)
		out = append(out, of)
	}
	return out, omitted, nil
}

// setContent sets a file out's content from readCapped's answer (nil: larger than the cap).
func setContent(of *OutFile, data []byte) {
	if data == nil {
		of.ContentOmitted = true
		return
	}
	s := base64.StdEncoding.EncodeToString(data)
	of.Content, of.Encoding, of.Size = &s, "base64", int64(len(data))
}

// readCapped reads a file of at most max bytes; nil means it was larger.
func readCapped(root *os.Root, name string, max int64) ([]byte, error) {
	f, err := root.OpenFile(name, os.O_RDONLY|noFollow, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is no longer a regular file", name)
	}
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, nil
	}
	if data == nil {
		data = []byte{}
	}
	return data, nil
}
