package workspace

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"syscall"
	"unicode/utf8"
)

// WriteFileRequest is the §9.2 write_file request.
type WriteFileRequest struct {
	envelope
	Path      string  `json:"path"`
	Content   *string `json:"content"`
	Overwrite *bool   `json:"overwrite,omitempty"`
}

// WriteFileResult is the §9.2 write_file result.
type WriteFileResult struct {
	Path         string `json:"path"`
	Created      bool   `json:"created"`
	BytesWritten int    `json:"bytesWritten"`
}

// writeHook, when set by tests, runs between the steps of an install (and before a command starts). It lets a
// test stop a write at each step (by crashing the process) and check that no partial file is ever visible, or
// change the filesystem inside a race window.
var writeHook func(step string)

func hook(step string) {
	if writeHook != nil {
		writeHook(step)
	}
}

// WriteFile implements write_file (§9.6).
func (w *Workspace) WriteFile(ctx context.Context, r *WriteFileRequest) (*WriteFileResult, error) {
	if !w.opts.AllowWrites {
		return nil, newErr(CodeWriteDisabled, "the workspace is read-only")
	}
	rel, err := cleanPath(r.Path)
	if err != nil {
		return nil, err
	}
	if rel == "" {
		return nil, newErr(CodeInvalidPath, "path names the workspace root, not a file")
	}
	if r.Content == nil {
		return nil, newErr(CodeInvalidRequest, "content is required")
	}
	content := *r.Content
	if len(content) > maxContentBytes {
		return nil, newErr(CodeWriteLimitExceeded, "content is larger than 1 MiB")
	}
	if !utf8.ValidString(content) {
		return nil, newErr(CodeInvalidRequest, "content is not valid UTF-8")
	}
	overwrite := r.Overwrite == nil || *r.Overwrite
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	w.writeMu.Lock()
	defer w.writeMu.Unlock()
	if err := w.checkRoot(); err != nil {
		return nil, err
	}
	created, err := w.install(ctx, rel, []byte(content), installOpts{overwrite: overwrite})
	if err != nil {
		return nil, err
	}
	return &WriteFileResult{Path: r.Path, Created: created, BytesWritten: len(content)}, nil
}

// installOpts says what install may replace. expect, for edits, is the file the edit was computed from: the
// target must still be that file (device, inode and bytes) just before the rename.
type installOpts struct {
	overwrite bool
	expect    *expectedFile
}

type expectedFile struct {
	id   fileID
	data []byte
}

// install writes data to rel atomically (§9.6 steps 1–5) and reports whether the target was created. Before
// the install step every failure leaves the workspace untouched; from the install step on, failures are
// marked "may have committed".
func (w *Workspace) install(ctx context.Context, rel string, data []byte, o installOpts) (bool, error) {
	parentRel, name := splitParent(rel)
	// 1. Target check: the parent is resolved with no symlink in any component and stays open, so every later
	// step addresses the same directory.
	dir, err := w.res.openDir(parentRel)
	if err != nil {
		return false, pathError(err, rel, CodeWriteUnavailable)
	}
	defer dir.close()
	dirID, err := dir.id()
	if err != nil {
		return false, newErr(CodeWriteUnavailable, "cannot stat the parent directory: "+errnoText(err))
	}
	old, exists, err := checkTarget(dir, name, rel, o)
	if err != nil {
		return false, err
	}

	// 2. Stage in an owner-only temporary file beside the target.
	var rnd [18]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return false, newErr(CodeWriteUnavailable, "no randomness for the temporary name")
	}
	tmp := ".codellm-" + hex.EncodeToString(rnd[:]) + ".tmp"
	tf, err := dir.createExcl(tmp)
	if err != nil {
		return false, newErr(CodeWriteUnavailable, "cannot create a temporary file: "+errnoText(err))
	}
	installed := false
	defer func() {
		tf.Close()
		if !installed {
			_ = dir.remove(tmp)
		}
	}()
	if err := stage(tf, data, exists, old); err != nil {
		return false, err
	}
	staged, err := fstatFile(tf)
	if err != nil {
		return false, newErr(CodeWriteUnavailable, "cannot stat the temporary file: "+errnoText(err))
	}
	hook("staged")
	if err := ctxErr(ctx); err != nil {
		return false, err
	}

	// 3. Re-check: the target is still what step 1 saw, the parent is still the directory we hold.
	if err := w.recheck(dir, dirID, parentRel, name, rel, exists, old, o); err != nil {
		return false, err
	}
	hook("checked")

	// 4. Install. A new target is linked, never renamed, so that a file created concurrently is not clobbered.
	linked, err := place(dir, tmp, name, rel, exists, &installed)
	if err != nil {
		return linked, err
	}
	hook("installed")

	// 5. Verify: make the directory entry durable, then re-open the target from the root and compare.
	if err := dir.sync(); err != nil {
		return !exists, committedErr(CodeWriteUnavailable, "cannot fsync the directory: "+errnoText(err))
	}
	if err := w.verifyInstalled(rel, staged.id, data); err != nil {
		return !exists, err
	}
	return !exists, nil
}

// checkTarget is install's step 1 on the open parent: the target, if it exists, is a regular file that
// may be replaced (and, for an edit, still exists).
func checkTarget(dir dirHandle, name, rel string, o installOpts) (statInfo, bool, error) {
	old, err := dir.lstat(name)
	exists := err == nil
	switch {
	case err != nil && !errors.Is(err, syscall.ENOENT) && !errors.Is(err, os.ErrNotExist):
		return old, exists, pathError(err, rel, CodeWriteUnavailable)
	case exists && !old.mode.IsRegular():
		return old, exists, newErr(CodeInvalidPath, "target exists and is not a regular file: "+rel)
	case exists && !o.overwrite:
		return old, exists, newErr(CodeEditConflict, "target already exists: "+rel)
	case !exists && o.expect != nil:
		return old, exists, newErr(CodeEditConflict, "file was removed while it was being edited: "+rel)
	}
	return old, exists, nil
}

// recheck is install's step 3: the target is still what step 1 saw (and, for an edit, still the file the
// edit was computed from), and the parent path still resolves to the directory held open.
func (w *Workspace) recheck(dir dirHandle, dirID fileID, parentRel, name, rel string, exists bool, old statInfo, o installOpts) error {
	cur, err := dir.lstat(name)
	switch {
	case exists && (err != nil || cur.id != old.id || !cur.mode.IsRegular()):
		return newErr(CodeEditConflict, "target changed while it was being written: "+rel)
	case !exists && err == nil:
		return newErr(CodeEditConflict, "target appeared while it was being written: "+rel)
	}
	again, err := w.res.openDir(parentRel)
	if err != nil {
		return pathError(err, rel, CodeWriteUnavailable)
	}
	againID, err := again.id()
	again.close()
	if err != nil || againID != dirID {
		return newErr(CodeInvalidPath, "parent directory changed while the file was being written: "+rel)
	}
	if o.expect != nil {
		return sameFile(dir, name, o.expect)
	}
	return nil
}

// place is install's step 4: rename the staged file over an existing target, or link it as a new one
// and remove the temporary name. *installed turns true once the target holds the new bytes; the bool is
// install's "created" for an error after that point.
func place(dir dirHandle, tmp, name, rel string, exists bool, installed *bool) (bool, error) {
	if exists {
		if err := dir.rename(tmp, name); err != nil {
			return false, committedErr(CodeWriteUnavailable, "cannot install the file: "+errnoText(err))
		}
		*installed = true
		return false, nil
	}
	if err := dir.link(tmp, name); err != nil {
		if errors.Is(err, syscall.EEXIST) || errors.Is(err, os.ErrExist) {
			return false, newErr(CodeEditConflict, "target appeared while it was being written: "+rel)
		}
		return false, committedErr(CodeWriteUnavailable, "cannot install the file: "+errnoText(err))
	}
	hook("linked")
	*installed = true
	if err := dir.remove(tmp); err != nil {
		return true, committedErr(CodeWriteUnavailable, "file installed but the temporary file could not be removed: "+errnoText(err))
	}
	return true, nil
}

// stage writes data to the temporary file, makes it durable, and gives it the old file's owner and mode.
func stage(tf *os.File, data []byte, exists bool, old statInfo) error {
	if _, err := tf.Write(data); err != nil {
		return newErr(CodeWriteUnavailable, "cannot write the temporary file: "+errnoText(err))
	}
	if err := tf.Sync(); err != nil {
		return newErr(CodeWriteUnavailable, "cannot fsync the temporary file: "+errnoText(err))
	}
	if !exists {
		return nil
	}
	cur, err := fstatFile(tf)
	if err != nil {
		return newErr(CodeWriteUnavailable, "cannot stat the temporary file: "+errnoText(err))
	}
	if old.uid >= 0 && (cur.uid != old.uid || cur.gid != old.gid) {
		if err := tf.Chown(old.uid, old.gid); err != nil {
			return newErr(CodeWriteUnavailable, "cannot give the new file the old owner: "+errnoText(err))
		}
	}
	if err := tf.Chmod(old.mode.Perm() | old.mode&(os.ModeSetuid|os.ModeSetgid|os.ModeSticky)); err != nil {
		return newErr(CodeWriteUnavailable, "cannot give the new file the old mode: "+errnoText(err))
	}
	if err := tf.Sync(); err != nil {
		return newErr(CodeWriteUnavailable, "cannot fsync the temporary file: "+errnoText(err))
	}
	return nil
}

// sameFile checks that name is still the file an edit was computed from: same identity and same bytes.
func sameFile(dir dirHandle, name string, want *expectedFile) error {
	f, err := dir.openNoFollow(name)
	if err != nil {
		return newErr(CodeEditConflict, "file changed while it was being edited: "+name)
	}
	defer f.Close()
	si, err := fstatFile(f)
	if err != nil || si.id != want.id || !si.mode.IsRegular() {
		return newErr(CodeEditConflict, "file was replaced while it was being edited: "+name)
	}
	got, err := io.ReadAll(io.LimitReader(f, int64(len(want.data))+1))
	if err != nil || !bytes.Equal(got, want.data) {
		return newErr(CodeEditConflict, "file content changed while it was being edited: "+name)
	}
	return nil
}

// verifyInstalled re-resolves rel from the root (no symlinks) and checks it is the staged inode with exactly
// the staged bytes.
func (w *Workspace) verifyInstalled(rel string, staged fileID, data []byte) error {
	f, err := w.res.openFile(rel, true)
	if err != nil {
		return committedErr(CodeWriteUnavailable, "installed file cannot be re-opened: "+rel)
	}
	defer f.Close()
	si, err := fstatFile(f)
	if err != nil || !si.mode.IsRegular() || si.id != staged {
		return committedErr(CodeWriteUnavailable, "installed file is not the staged file: "+rel)
	}
	got, err := io.ReadAll(io.LimitReader(f, int64(len(data))+1))
	if err != nil || !bytes.Equal(got, data) {
		return committedErr(CodeWriteUnavailable, "installed file does not hold the staged bytes: "+rel)
	}
	return nil
}
