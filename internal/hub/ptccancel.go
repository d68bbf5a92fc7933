package hub

// Cancellation of programmatic runs (the Code API's programmatic-cancellation.ts): a request to
// /v1/exec/programmatic may carry X-LibreChat-Code-Request-ID; POST /v1/exec/programmatic/cancel
// {request_id} from the same caller stops that request's run. The request's record ("ptc:r:<id>") is in
// the store, so the cancel may reach any replica: it marks the record and notifies the record's topic,
// which wakes the replica running the request; that replica cancels its dispatch (the worker's run is
// cancelled, as when a client goes away) and answers {status:"error", error:"Programmatic execution
// request cancelled"}. A cancel that arrives before its request marks the ID, and the request is answered
// cancelled without running.

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/codellm/codellm/internal/hub/store"
)

// ptcRequestRecord is the record of one request ID.
type ptcRequestRecord struct {
	Owner     string `json:"owner"`
	Reserved  bool   `json:"reserved,omitempty"`  // a request with this ID started
	Cancelled bool   `json:"cancelled,omitempty"` // a cancel arrived
	Finished  bool   `json:"finished,omitempty"`  // the request was answered
}

func ptcRequestKey(id string) string { return "ptc:r:" + id }

// ptcCancel is one request's cancellation: nothing when the request carries no ID.
type ptcCancel struct {
	h         *Hub
	id, owner string
	flag      atomic.Bool
}

// ptcRequestTTL keeps a request ID's record past any run of it.
func (h *Hub) ptcRequestTTL() time.Duration {
	return h.cfg.MaxTimeout + h.cfg.QueueTimeout + time.Minute
}

// ptcUpdateRequest changes a request ID's record in one transaction (fn returns the record to store, or
// nil for no change, and may notify).
func (h *Hub) ptcUpdateRequest(ctx context.Context, id string, fn func(tx store.Txn, rec *ptcRequestRecord) (*ptcRequestRecord, error)) error {
	return h.backend.Update(ctx, func(tx store.Txn) error {
		got, err := tx.Get(ptcRequestKey(id))
		if err != nil {
			return err
		}
		var rec *ptcRequestRecord
		if got[0] != nil {
			rec = &ptcRequestRecord{}
			if err := json.Unmarshal(got[0], rec); err != nil {
				return store.Abort(errors.Join(store.ErrCorrupt, err))
			}
		}
		next, err := fn(tx, rec)
		if err != nil || next == nil {
			return store.Abort(err)
		}
		b, _ := json.Marshal(next)
		tx.Put(ptcRequestKey(id), b, store.Volatile, tx.Now().Add(h.ptcRequestTTL()))
		return nil
	})
}

var errPTCInUse = errors.New("programmatic request ID in use")

// ptcReserve takes the request's ID (if it has one): an ID another request (or another caller) holds is
// refused 409, as upstream does.
func (h *Hub) ptcReserve(r *http.Request, key *ClientKey) (*ptcCancel, *ptcFail) {
	c := &ptcCancel{h: h, owner: ptcOwner(key)}
	raw, present := r.Header[http.CanonicalHeaderKey(ptcRequestHeader)]
	if !present {
		return c, nil
	}
	id := strings.TrimSpace(strings.Join(raw, ""))
	if !ptcRequestID.MatchString(id) {
		return nil, &ptcFail{http.StatusBadRequest, "Invalid programmatic request ID: " + ptcRequestHeader + " must be 16 to 128 characters of A-Z a-z 0-9 _ -"}
	}
	err := h.ptcUpdateRequest(r.Context(), id, func(_ store.Txn, rec *ptcRequestRecord) (*ptcRequestRecord, error) {
		if rec == nil {
			rec = &ptcRequestRecord{Owner: c.owner}
		}
		if rec.Owner != c.owner || rec.Reserved {
			return nil, errPTCInUse
		}
		rec.Reserved = true
		c.flag.Store(rec.Cancelled) // cancelled before it started: answered cancelled, nothing runs
		return rec, nil
	})
	if errors.Is(err, errPTCInUse) {
		return nil, &ptcFail{http.StatusConflict, "Programmatic request ID is already in use"}
	}
	if err != nil {
		return nil, &ptcFail{http.StatusServiceUnavailable, "Cancellation service unavailable"}
	}
	c.id = id
	return c, nil
}

func (c *ptcCancel) cancelled() bool { return c.flag.Load() }

// release marks the request answered; the record stays (its ID is not reused) until it expires.
func (c *ptcCancel) release() {
	if c.id == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = c.h.ptcUpdateRequest(ctx, c.id, func(_ store.Txn, rec *ptcRequestRecord) (*ptcRequestRecord, error) {
		if rec == nil || rec.Owner != c.owner {
			return nil, nil
		}
		rec.Finished = true
		return rec, nil
	})
}

// watch returns a context for the request's run that ends when a cancel of its ID arrives (on this
// replica or another), and stop, which ends the watch.
func (c *ptcCancel) watch(ctx context.Context) (context.Context, func()) {
	if c.id == "" {
		return ctx, func() {}
	}
	run, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			ch, release := c.h.waits.watch(ptcRequestKey(c.id))
			got, err := c.h.backend.Read(run, ptcRequestKey(c.id))
			var rec ptcRequestRecord
			if err == nil && got[0] != nil && json.Unmarshal(got[0], &rec) == nil && rec.Cancelled {
				release()
				c.flag.Store(true)
				cancel()
				return
			}
			t := time.NewTimer(c.h.cfg.PollInterval)
			select {
			case <-ch:
			case <-t.C:
			case <-done:
			case <-run.Done():
			}
			t.Stop()
			release()
			select {
			case <-done:
				return
			case <-run.Done():
				return
			default:
			}
		}
	}()
	return run, func() {
		close(done)
		wg.Wait()
		cancel()
	}
}

// handleProgrammaticCancel is POST /v1/exec/programmatic/cancel {request_id}.
func (h *Hub) handleProgrammaticCancel(w http.ResponseWriter, r *http.Request, key *ClientKey) {
	raw, err := readBody(r, h.cfg.MaxBody)
	if err != nil {
		ce := bodyError(err)
		writePTCError(w, ce.status, ce.message)
		return
	}
	var body struct {
		RequestID any `json:"request_id"`
	}
	_ = json.Unmarshal(raw, &body)
	id, _ := body.RequestID.(string)
	id = strings.TrimSpace(id)
	if !ptcRequestID.MatchString(id) {
		writePTCError(w, http.StatusBadRequest, "Invalid or missing request_id")
		return
	}
	owner := ptcOwner(key)
	var forbidden, finished bool
	err = h.ptcUpdateRequest(r.Context(), id, func(tx store.Txn, rec *ptcRequestRecord) (*ptcRequestRecord, error) {
		forbidden, finished = false, false
		switch {
		case rec == nil:
			rec = &ptcRequestRecord{Owner: owner}
		case rec.Owner != owner:
			forbidden = true
			return nil, nil
		case rec.Finished:
			finished = true
			return nil, nil
		}
		rec.Cancelled = true
		tx.Notify(ptcRequestKey(id))
		return rec, nil
	})
	switch {
	case err != nil:
		writePTCError(w, http.StatusServiceUnavailable, "Cancellation service unavailable")
	case forbidden:
		writePTCError(w, http.StatusForbidden, "Programmatic request belongs to another principal")
	case finished:
		writeJSON(w, http.StatusOK, []byte(`{"status":"already_completed"}`))
	default:
		writeJSON(w, http.StatusAccepted, []byte(`{"status":"cancellation_requested"}`))
	}
}
