package filestore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// Dir is the one-node store: a directory with one sub-directory per session holding meta.json (owner,
// expiry, file list) and one blob per file, named by its id. Every change is written to a temporary name
// and renamed, blobs before the meta.json that lists them, so a crash leaves at most unreferenced blobs,
// which Open removes. The index lives in memory behind one mutex; Open rebuilds it from the directory.
type Dir struct {
	root   string
	limits Limits
	now    func() time.Time

	mu       sync.Mutex
	closed   bool
	sessions map[string]*dirSession
	total    int64
	tenants  map[string]int64 // bytes by tenant
	swept    time.Time
}

type dirSession struct {
	Tenant  string    `json:"tenant"`
	Expires time.Time `json:"expires"`
	Files   []File    `json:"files"`
	bytes   int64
}

// OpenDir opens (creating) the store rooted at root. Expired sessions and unreferenced blobs are removed.
func OpenDir(root string, l Limits) (*Dir, error) {
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("filestore: %w", err)
	}
	d := &Dir{root: root, limits: l.WithDefaults(), now: time.Now, sessions: map[string]*dirSession{}, tenants: map[string]int64{}}
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("filestore: %w", err)
	}
	for _, e := range ents {
		if !e.IsDir() || !ValidID(e.Name()) {
			continue
		}
		s, err := d.load(e.Name())
		if err != nil || !s.Expires.After(d.now()) {
			_ = os.RemoveAll(filepath.Join(root, e.Name()))
			continue
		}
		d.sessions[e.Name()] = s
		d.total += s.bytes
		d.tenants[s.Tenant] += s.bytes
	}
	return d, nil
}

// load reads a session's meta.json and removes blobs it does not list.
func (d *Dir) load(sid string) (*dirSession, error) {
	b, err := os.ReadFile(filepath.Join(d.root, sid, "meta.json"))
	if err != nil {
		return nil, err
	}
	var s dirSession
	if err := json.Unmarshal(b, &s); err != nil || s.Tenant == "" {
		return nil, errCorrupt
	}
	listed := map[string]bool{"meta.json": true}
	for _, f := range s.Files {
		listed[f.ID] = true
		s.bytes += f.Size
	}
	ents, _ := os.ReadDir(filepath.Join(d.root, sid))
	for _, e := range ents {
		if !listed[e.Name()] {
			_ = os.Remove(filepath.Join(d.root, sid, e.Name()))
		}
	}
	return &s, nil
}

// sweep drops expired sessions, at most once a minute. d.mu is held.
func (d *Dir) sweep(now time.Time) {
	if now.Sub(d.swept) < time.Minute {
		return
	}
	d.swept = now
	for sid, s := range d.sessions {
		if !s.Expires.After(now) {
			d.drop(sid, s)
		}
	}
}

func (d *Dir) drop(sid string, s *dirSession) {
	delete(d.sessions, sid)
	d.total -= s.bytes
	d.account(s.Tenant, -s.bytes)
	_ = os.RemoveAll(filepath.Join(d.root, sid))
}

// account adds n bytes to tenant's count, forgetting a tenant with none. d.mu is held.
func (d *Dir) account(tenant string, n int64) {
	if d.tenants[tenant] += n; d.tenants[tenant] <= 0 {
		delete(d.tenants, tenant)
	}
}

// live returns the session if it exists and has not expired. d.mu is held.
func (d *Dir) live(sid string, now time.Time) *dirSession {
	s := d.sessions[sid]
	if s != nil && !s.Expires.After(now) {
		d.drop(sid, s)
		return nil
	}
	return s
}

// Put implements Store.
func (d *Dir) Put(_ context.Context, tenant, sid string, files []Upload) ([]File, error) {
	if err := check(d.limits, tenant, sid, files); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	now := d.now()
	d.sweep(now)
	s := d.live(sid, now)
	if s != nil && s.Tenant != tenant {
		return nil, ErrNotFound
	}
	add := batchBytes(files)
	var count int
	var have int64
	if s != nil {
		count, have = len(s.Files), s.bytes
	}
	switch {
	case count+len(files) > d.limits.MaxSessionFiles:
		return nil, ErrTooManyFiles
	case have+add > d.limits.MaxSessionBytes:
		return nil, ErrSessionFull
	case d.tenants[tenant]+add > d.limits.MaxTenantBytes:
		return nil, ErrTenantFull
	case d.total+add > d.limits.MaxTotalBytes:
		return nil, ErrStoreFull
	}
	next := &dirSession{Tenant: tenant, Expires: now.Add(d.limits.TTL), bytes: have + add}
	if s != nil {
		next.Files = slices.Clone(s.Files)
	}
	dir := filepath.Join(d.root, sid)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	var out []File
	for _, u := range files {
		f := newFile(sid, u, now)
		if err := writeAtomic(filepath.Join(dir, f.ID), u.Data); err != nil {
			d.unwrite(dir, out, s == nil)
			return nil, err
		}
		out = append(out, f)
	}
	next.Files = append(next.Files, out...)
	if err := d.writeMeta(sid, next); err != nil {
		d.unwrite(dir, out, s == nil)
		return nil, err
	}
	d.sessions[sid] = next
	d.total += add
	d.account(tenant, add)
	return out, nil
}

// unwrite removes the blobs of a failed batch (and the directory of a session it was creating).
func (d *Dir) unwrite(dir string, written []File, created bool) {
	if created {
		_ = os.RemoveAll(dir)
		return
	}
	for _, f := range written {
		_ = os.Remove(filepath.Join(dir, f.ID))
	}
}

func (d *Dir) writeMeta(sid string, s *dirSession) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	return writeAtomic(filepath.Join(d.root, sid, "meta.json"), b)
}

// writeAtomic writes data under a temporary name in the same directory and renames it into place.
func writeAtomic(name string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(name), ".tmp-*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if serr := f.Sync(); err == nil {
		err = serr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), name)
	}
	if err != nil {
		_ = os.Remove(f.Name())
	}
	return err
}

// Touch implements Store.
func (d *Dir) Touch(_ context.Context, tenant, sid string) error {
	if tenant == "" || !ValidID(sid) {
		return ErrInvalid
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrClosed
	}
	now := d.now()
	d.sweep(now)
	s := d.live(sid, now)
	if s != nil && s.Tenant != tenant {
		return ErrNotFound
	}
	next := &dirSession{Tenant: tenant, Expires: now.Add(d.limits.TTL)}
	if s != nil {
		next.Files, next.bytes = s.Files, s.bytes
	}
	if err := os.MkdirAll(filepath.Join(d.root, sid), 0o700); err != nil {
		return err
	}
	if err := d.writeMeta(sid, next); err != nil {
		return err
	}
	d.sessions[sid] = next
	return nil
}

// Owner implements Store.
func (d *Dir) Owner(_ context.Context, sid string) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return "", ErrClosed
	}
	if s := d.live(sid, d.now()); s != nil {
		return s.Tenant, nil
	}
	return "", ErrNotFound
}

// List implements Store.
func (d *Dir) List(_ context.Context, tenant, sid string) ([]File, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, ErrClosed
	}
	s := d.live(sid, d.now())
	if s == nil || s.Tenant != tenant {
		return []File{}, nil
	}
	return slices.Clone(s.Files), nil
}

// Get implements Store.
func (d *Dir) Get(_ context.Context, tenant, sid, fileID string) (File, []byte, error) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return File{}, nil, ErrClosed
	}
	s := d.live(sid, d.now())
	var f File
	ok := false
	if s != nil && s.Tenant == tenant {
		for _, x := range s.Files {
			if x.ID == fileID {
				f, ok = x, true
			}
		}
	}
	d.mu.Unlock()
	if !ok {
		return File{}, nil, ErrNotFound
	}
	// Blobs are immutable once listed, so reading outside the lock is safe; a session dropped meanwhile
	// reads as not found.
	b, err := os.ReadFile(filepath.Join(d.root, sid, f.ID))
	if errors.Is(err, fs.ErrNotExist) {
		return File{}, nil, ErrNotFound
	}
	if err != nil {
		return File{}, nil, err
	}
	if int64(len(b)) != f.Size {
		return File{}, nil, errCorrupt
	}
	return f, b, nil
}

// Close implements Store. Files stay on disk for the next OpenDir.
func (d *Dir) Close() error {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	return nil
}

// Delete implements Store. The new meta.json is written before the blob is removed, so a crash between
// the two leaves an unreferenced blob (removed by the next OpenDir), never a listed file without bytes.
func (d *Dir) Delete(_ context.Context, tenant, sid, fileID string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrClosed
	}
	s := d.live(sid, d.now())
	if s == nil || s.Tenant != tenant {
		return ErrNotFound
	}
	i := slices.IndexFunc(s.Files, func(f File) bool { return f.ID == fileID })
	if i < 0 {
		return ErrNotFound
	}
	size := s.Files[i].Size
	next := &dirSession{Tenant: s.Tenant, Expires: s.Expires, Files: slices.Delete(slices.Clone(s.Files), i, i+1), bytes: s.bytes - size}
	if err := d.writeMeta(sid, next); err != nil {
		return err
	}
	_ = os.Remove(filepath.Join(d.root, sid, fileID))
	d.sessions[sid] = next
	d.total -= size
	d.account(tenant, -size)
	return nil
}
