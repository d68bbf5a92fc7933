package worker

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/hub/boltstore"
	"github.com/codellm/codellm/internal/hub/store"
	"github.com/codellm/codellm/internal/workspace"
)

// dispatchTool enqueues a workspace tool assignment the way the hub's dispatcher does and waits for its
// settlement (nil when it expired unsettled).
func (h *testHub) dispatchTool(t testing.TB, workerID, request string, timeout time.Duration) *store.Settlement {
	t.Helper()
	ctx := context.Background()
	req, err := bridge.Canonicalize([]byte(request))
	if err != nil {
		t.Fatal(err)
	}
	p := store.EnqueueParams{WorkerID: workerID, AssignmentID: bridge.NewID(), LeaseToken: bridge.NewSecret(),
		ExpiresAt: time.Now().Add(timeout), ExecutionKind: bridge.KindWorkspaceTool, Request: req}
	p.LeaseTokenHash = bridge.HashSecret(p.LeaseToken)
	var a *store.Assignment
	for deadline := time.Now().Add(10 * time.Second); ; {
		p.ExpiresAt = time.Now().Add(timeout)
		a, err = h.store.Enqueue(ctx, p)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("enqueue: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for time.Now().Before(a.ExpiresAt) {
		if st, err := h.store.Settlement(ctx, workerID, a.ID); err != nil {
			t.Fatal(err)
		} else if st != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	st, err := h.store.Complete(ctx, workerID, a.ID)
	if errors.Is(err, bridge.ErrAssignmentExpired) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return st
}

type wsSetup struct {
	root, marker string
	ws           *workspace.Workspace
}

func newWorkspace(t testing.TB, writes bool) *wsSetup {
	t.Helper()
	root := t.TempDir()
	marker := filepath.Join(t.TempDir(), "state", "marker.json")
	ws, err := workspace.Open(root, workspace.Options{AllowWrites: writes, ProtectedPaths: []string{marker}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	return &wsSetup{root: root, marker: marker, ws: ws}
}

func (s *wsSetup) apply(cfg Config) Config {
	cfg.Workspace, cfg.WorkspaceID, cfg.WorkspaceName, cfg.MarkerPath = s.ws, "primary", "project", s.marker
	return cfg
}

func settled(t testing.TB, st *store.Settlement) *bridge.Object {
	t.Helper()
	if st == nil {
		t.Fatal("no settlement")
	}
	o, err := bridge.ParseObject(st.Canonical)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func field(o *bridge.Object, path ...string) any {
	var v any = o
	for _, k := range path {
		ob, ok := v.(*bridge.Object)
		if !ok {
			return nil
		}
		v, _ = ob.Get(k)
	}
	return v
}

// Quarantine lifecycle (E21/E22): a write_file whose settlement cannot be delivered keeps the marker and
// exits 5; a restart is refused; clearing the marker lets the worker register and serve again. A settled
// mutation clears its own marker.
func TestQuarantineLifecycle(t *testing.T) {
	// A short store grace: the quarantined incarnation's unsettled lock then expires soon after the deadline.
	h := newTestHub(t, nil, boltstore.WithGrace(time.Second))
	id, path := h.pair(t, "qw")
	ws := newWorkspace(t, true)
	sup := newEmbedded(t, false)
	r := start(t, ws.apply(baseConfig(h, id, path, sup)))
	h.waitReady(t, "qw")

	// Control: a settled write clears the marker.
	st := settled(t, h.dispatchTool(t, "qw", `{"protocolVersion":1,"operation":"write_file","workspaceId":"primary","path":"ok.txt","content":"fine\n"}`, 5*time.Second))
	if field(st, "status") != "fulfilled" || field(st, "result", "created") != true {
		t.Fatalf("write: %s", st)
	}
	// The hub stores the settlement before the worker reads its 200 and clears the marker.
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		_, err := os.Stat(ws.marker)
		if errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("marker left after a settled mutation: %v", err)
		}
	}

	// The hub becomes unreachable for settlements.
	h.setFault(func(w http.ResponseWriter, r *http.Request) bool {
		if strings.HasSuffix(r.URL.Path, "/settle") {
			http.Error(w, `{"error":"unavailable"}`, http.StatusServiceUnavailable)
			return true
		}
		return false
	})
	if st := h.dispatchTool(t, "qw", `{"protocolVersion":1,"operation":"write_file","workspaceId":"primary","path":"lost.txt","content":"x"}`, 2*time.Second); st != nil {
		t.Fatalf("settled through a failing hub: %s", st.Canonical)
	}
	err := r.wait(t, 20*time.Second)
	if ExitCode(err) != ExitQuarantined {
		t.Fatalf("exit %d (%v)", ExitCode(err), err)
	}
	h.setFault(nil)
	if b, err := os.ReadFile(filepath.Join(ws.root, "lost.txt")); err != nil || string(b) != "x" {
		t.Fatalf("the mutation did run: %q %v", b, err)
	}
	fi, err := os.Stat(ws.marker)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("marker: %v %v", fi, err)
	}
	m, err := readMarker(ws.marker)
	if err != nil || m.OwnerID != r.w.IncarnationID() || m.WorkspaceID != "primary" || m.WorkerID != "qw" {
		t.Fatalf("marker %+v %v", m, err)
	}

	// Restart is refused while the marker exists.
	r2 := start(t, ws.apply(baseConfig(h, id, path, sup)))
	if err := r2.wait(t, 10*time.Second); ExitCode(err) != ExitQuarantined {
		t.Fatalf("restart with marker: exit %d (%v)", ExitCode(err), err)
	}
	// A marker readable by others is refused too (E22), even if well-formed.
	if err := os.Chmod(ws.marker, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := CheckMarker(ws.marker); !errors.Is(err, ErrQuarantined) || !strings.Contains(err.Error(), "0644") {
		t.Fatalf("0644 marker: %v", err)
	}

	// Clear, restart, serve.
	if err := RemoveMarker(ws.marker); err != nil {
		t.Fatal(err)
	}
	r3 := start(t, ws.apply(baseConfig(h, id, path, sup)))
	r3.waitRegistered(t)
	st = settled(t, h.dispatchTool(t, "qw", `{"protocolVersion":1,"operation":"read_file","workspaceId":"primary","path":"lost.txt"}`, 5*time.Second))
	if field(st, "result", "content") != "x" || field(st, "result", "operation") != "read_file" {
		t.Fatalf("read after clear: %s", st)
	}
	if err := r3.stop(t); err != nil {
		t.Fatal(err)
	}
}

// Negotiation (E24–E26): against the codellm hub the second registration carries every operation; a hub
// that sends no supported* lists leaves only read_file and search_text, and a forged list_files is
// refused locally with INVALID_REQUEST; a hub that answers 400 to the richer registration leaves the
// worker running on the compatible set.
func TestNegotiation(t *testing.T) {
	all := []string{"read_file", "search_text", "list_files", "write_file", "preview_edit", "edit_file"}
	t.Run("full", func(t *testing.T) {
		h := newTestHub(t, nil)
		id, path := h.pair(t, "neg")
		ws := newWorkspace(t, true)
		r := start(t, ws.apply(baseConfig(h, id, path, newEmbedded(t, false))))
		h.waitReady(t, "neg")
		// The negotiated registration follows the compatible one at once.
		caps := r.w.ActiveCapabilities()
		for end := time.Now().Add(5 * time.Second); time.Now().Before(end) && len(caps.WorkspaceTools.Operations) != len(all); {
			time.Sleep(10 * time.Millisecond)
			caps = r.w.ActiveCapabilities()
		}
		if caps.WorkspaceTools == nil || !slices.Equal(caps.WorkspaceTools.Operations, all) ||
			!slices.Equal(caps.WorkspaceTools.WriteFileModes, []string{"replace", "create"}) ||
			!slices.Equal(caps.WorkspaceTools.ListFileFeatures, []string{"after_path"}) {
			t.Fatalf("active %+v", caps.WorkspaceTools)
		}
	})
	t.Run("older hub", func(t *testing.T) {
		h := newTestHub(t, nil)
		id, path := h.pair(t, "neg")
		h.setFault(stripSupported(t, h))
		ws := newWorkspace(t, true)
		if err := os.WriteFile(filepath.Join(ws.root, "a.txt"), []byte("alpha\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		r := start(t, ws.apply(baseConfig(h, id, path, newEmbedded(t, false))))
		h.waitReady(t, "neg")
		caps := r.w.ActiveCapabilities()
		if caps.WorkspaceTools == nil || !slices.Equal(caps.WorkspaceTools.Operations, []string{"read_file", "search_text"}) {
			t.Fatalf("active %+v", caps.WorkspaceTools)
		}
		st := settled(t, h.dispatchTool(t, "neg", `{"protocolVersion":1,"operation":"list_files","workspaceId":"primary"}`, 5*time.Second))
		if field(st, "status") != "rejected" || field(st, "errorCode") != "INVALID_REQUEST" {
			t.Fatalf("forged list_files: %s", st)
		}
		st = settled(t, h.dispatchTool(t, "neg", `{"protocolVersion":1,"operation":"search_text","workspaceId":"primary","query":"alp"}`, 5*time.Second))
		if field(st, "status") != "fulfilled" {
			t.Fatalf("search: %s", st)
		}
	})
	t.Run("richer registration refused", func(t *testing.T) {
		h := newTestHub(t, nil)
		id, path := h.pair(t, "neg")
		refused := 0
		h.setFault(func(w http.ResponseWriter, r *http.Request) bool {
			if !strings.HasSuffix(r.URL.Path, "/workers/register") {
				return false
			}
			b, _ := readBody(r)
			if strings.Contains(string(b), "list_files") {
				refused++
				http.Error(w, `{"error":"Invalid bridge worker registration"}`, http.StatusBadRequest)
				return true
			}
			return false
		})
		ws := newWorkspace(t, true)
		r := start(t, ws.apply(baseConfig(h, id, path, newEmbedded(t, false))))
		h.waitReady(t, "neg")
		rep := h.exec(t, "bash", "echo still-running", nil)
		if rep.status != 200 || !strings.Contains(string(rep.body), "still-running") {
			t.Fatalf("exec: %d %s", rep.status, rep.body)
		}
		caps := r.w.ActiveCapabilities()
		if caps.WorkspaceTools == nil || !slices.Equal(caps.WorkspaceTools.Operations, []string{"read_file", "search_text"}) || refused != 1 {
			t.Fatalf("active %+v after %d refusals", caps.WorkspaceTools, refused)
		}
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
	})
}
