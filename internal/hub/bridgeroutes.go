package hub

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/httpserve"
	"github.com/codellm/codellm/internal/hub/store"
)

var (
	errNotConfigured = bridge.Errorf(http.StatusForbidden, "Bridge worker is not configured")
	errAuthRequired  = bridge.Errorf(http.StatusUnauthorized, "Bridge worker authentication required")
	errAdminAuth     = bridge.Errorf(http.StatusUnauthorized, "Invalid bridge admin token")
	errNoAdmin       = bridge.Errorf(http.StatusServiceUnavailable, "Code bridge is not configured")
	errPairingStatic = bridge.Errorf(http.StatusConflict, "Paired worker authentication is disabled")
	errNotFound      = bridge.Errorf(http.StatusNotFound, "Not found")
	errMethod        = bridge.Errorf(http.StatusMethodNotAllowed, "Method not allowed")
	errConnLimit     = bridge.Errorf(http.StatusServiceUnavailable, "The hub has as many connections of this kind open as it allows; retry later")
)

// admitBridge gives the connection of a bridge request that passed the header checks its place: worker
// routes among the worker connections, admin routes among the client ones. Redeem (unauthenticated, its
// code is in the body) stays pending.
func (h *Hub) admitBridge(r *http.Request, rt route) bool {
	switch rt.name {
	case "redeem":
		return true
	case "pairings", "revoke", "status":
		return h.conns.admit(r, connClient)
	}
	return h.conns.admit(r, connWorker)
}

// route is a parsed bridge path.
type route struct {
	name         string // redeem, register, pairings, ready, lease, refresh, reset, revoke, status, ack, cancellation, settle
	workerID     string
	assignmentID string
}

// parseRoute splits the raw path below /v1/bridge/. The worker ID segment is
// percent-decoded, so raw ':', "%3A" and "%3a" are all accepted.
func parseRoute(rest string) (route, bool) {
	switch rest {
	case "pairings/redeem":
		return route{name: "redeem"}, true
	case "workers/register":
		return route{name: "register"}, true
	case "pairings":
		return route{name: "pairings"}, true
	}
	seg := strings.Split(rest, "/")
	if len(seg) < 3 || seg[0] != "workers" {
		return route{}, false
	}
	id, err := url.PathUnescape(seg[1])
	if err != nil {
		return route{}, false
	}
	tail := strings.Join(seg[2:], "/")
	switch tail {
	case "ready", "lease", "revoke", "status":
		return route{name: tail, workerID: id}, true
	case "credentials/refresh":
		return route{name: "refresh", workerID: id}, true
	case "workspaces/reset":
		return route{name: "reset", workerID: id}, true
	}
	if len(seg) == 5 && seg[2] == "assignments" {
		switch seg[4] {
		case "ack", "cancellation", "settle":
			return route{name: seg[4], workerID: id, assignmentID: seg[3]}, true
		}
	}
	return route{}, false
}

// readBody reads at most limit bytes; more is BODY_TOO_LARGE (checked
// before parsing, §15).
func readBody(r *http.Request, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return nil, bridge.Errorf(http.StatusBadRequest, "Unreadable request body")
	}
	if int64(len(b)) > limit {
		return nil, bridge.ErrBodyTooLarge
	}
	return b, nil
}

func (h *Hub) serveBridge(w http.ResponseWriter, r *http.Request, rest string) {
	rt, ok := parseRoute(rest)
	if !ok {
		bridge.WriteError(w, errNotFound)
		return
	}
	wantMethod := http.MethodPost
	if rt.name == "status" {
		wantMethod = http.MethodGet
	}
	if r.Method != wantMethod {
		w.Header().Set("Allow", wantMethod)
		bridge.WriteError(w, errMethod)
		return
	}
	// Authenticate what the headers can prove before reading a byte of the body: a settle body may be
	// 32 MiB, and reading it first let anonymous connections cost the hub that much memory each.
	if err := h.preauth(r, rt); err != nil {
		h.writeBridgeError(w, rt, err)
		return
	}
	if !h.admitBridge(r, rt) {
		w.Header().Set("Retry-After", "1")
		w.Header().Set("Connection", "close")
		bridge.WriteError(w, errConnLimit)
		return
	}
	limit := h.cfg.MaxBody
	if rt.name == "settle" {
		limit = h.cfg.MaxSettleBody
		release, err := h.largeBodySlot(r.Context())
		if err != nil {
			return // the client went away while waiting
		}
		defer release()
	}
	raw, err := readBody(r, limit)
	if err != nil {
		bridge.WriteError(w, err)
		return
	}
	switch rt.name {
	case "pairings", "revoke", "status":
		err = h.serveAdmin(w, r, rt, raw)
	case "redeem":
		err = h.handleRedeem(w, r, raw)
	default:
		err = h.serveWorker(w, r, rt, raw)
	}
	if err != nil {
		h.writeBridgeError(w, rt, err)
	}
}

// writeBridgeError answers a bridge route's failure: a store outage is 503
// STORE_UNAVAILABLE with Retry-After (counted and logged once by
// storeFailed; the worker retries), other non-protocol failures a bare 500
// whose detail stays in the log.
func (h *Hub) writeBridgeError(w http.ResponseWriter, rt route, err error) {
	if errors.Is(err, store.ErrUnavailable) {
		w.Header().Set("Retry-After", strconv.Itoa(storeRetryAfter))
		err = bridge.ErrStoreUnavailable
	}
	var be *bridge.Error
	if !errors.As(err, &be) && !errors.Is(err, context.Canceled) {
		h.cfg.Logger.Error("bridge request failed", "route", rt.name, "worker", rt.workerID, "err", err)
	}
	bridge.WriteError(w, err)
}

// credential looks a worker credential up; when it is unknown because the
// store lost its data, the answer is STORE_RESET, so that the worker tells
// its operator to pair it again.
func (h *Hub) credential(ctx context.Context, workerID, credHash string) (*store.Credential, error) {
	cred, err := h.store.Credential(ctx, workerID, credHash)
	if errors.Is(err, bridge.ErrCredentialInvalid) && h.storeWasReset(ctx) {
		return nil, bridge.ErrStoreReset
	}
	return cred, err
}

// preauth applies the header-only part of authentication before the body is read: the admin token for
// admin routes; for worker routes the static bearer, or the presence and freshness of a paired proof and,
// on settle (the one large body), that its credential is a live one of the worker in the path. The
// signature, which covers the body, is verified after reading it (authWorker). Redeem carries its code
// in the body and stays within MaxBody.
func (h *Hub) preauth(r *http.Request, rt route) error {
	switch rt.name {
	case "redeem":
		return nil
	case "pairings", "revoke", "status":
		return h.authAdmin(r)
	}
	if h.cfg.AuthMode == AuthStatic {
		tok, ok := httpserve.Bearer(r)
		if !ok || !httpserve.Equal(tok, h.cfg.WorkerToken) {
			return errAuthRequired
		}
		return nil
	}
	proof, ok := bridge.ProofFromHeaders(r.Header)
	if !ok {
		return errAuthRequired
	}
	ts, err := bridge.ParseTime(proof.Timestamp)
	if err != nil {
		return bridge.ErrProofInvalid
	}
	if skew := time.Since(ts); skew > h.cfg.ClockSkew || skew < -h.cfg.ClockSkew {
		return bridge.ErrProofInvalid
	}
	if rt.name != "settle" {
		return nil
	}
	if !bridge.ValidWorkerID(rt.workerID) {
		return errAuthRequired
	}
	// A cached credential will do: Settle confirms it again before storing anything.
	_, _, err = h.workerCredential(r.Context(), rt.workerID, bridge.HashSecret(proof.Credential), true)
	return err
}

// largeBodySlot bounds how many settle bodies (up to MaxSettleBody each) are read at once, so that even
// authenticated workers cannot make the hub hold more than maxLargeBodies of them in memory.
func (h *Hub) largeBodySlot(ctx context.Context) (func(), error) {
	h.largeOnce.Do(func() { h.largeBodies = make(chan struct{}, maxLargeBodies) })
	select {
	case h.largeBodies <- struct{}{}:
		return func() { <-h.largeBodies }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// maxLargeBodies is how many settle bodies the hub reads concurrently.
const maxLargeBodies = 8

// authAdmin applies §3.9.
func (h *Hub) authAdmin(r *http.Request) error {
	if h.cfg.AdminToken == "" {
		return errNoAdmin
	}
	tok, ok := httpserve.Bearer(r)
	if !ok || !httpserve.Equal(tok, h.cfg.AdminToken) {
		return errAdminAuth
	}
	return nil
}

func (h *Hub) serveAdmin(w http.ResponseWriter, r *http.Request, rt route, raw []byte) error {
	if err := h.authAdmin(r); err != nil {
		return err
	}
	ctx := r.Context()
	switch rt.name {
	case "pairings":
		if h.cfg.AuthMode == AuthStatic {
			return errPairingStatic
		}
		o, _, err := bridge.ParseBody(raw)
		if err != nil {
			return err
		}
		req, err := bridge.ValidateCreatePairing(o)
		if err != nil {
			return err
		}
		if !h.configured(req.WorkerID) || (h.cfg.DynamicWorkers && req.Binding == nil) {
			return bridge.Errorf(http.StatusBadRequest, bridge.MsgInvalidPairing)
		}
		code := bridge.NewPairingCode()
		exp := time.Now().Add(h.cfg.PairingTTL)
		if err := h.store.CreatePairing(ctx, req.WorkerID, bridge.HashSecret(code), req.Binding, exp); err != nil {
			return err
		}
		h.cfg.Logger.Info("pairing code issued", "worker", req.WorkerID)
		writeValue(w, http.StatusOK, bridge.CreatePairingResponse{ProtocolVersion: 1, WorkerID: req.WorkerID, Code: code, ExpiresAt: bridge.FormatTime(exp)})
	case "revoke":
		if !bridge.ValidWorkerID(rt.workerID) || !h.configured(rt.workerID) {
			return bridge.Errorf(http.StatusBadRequest, "Invalid bridge worker")
		}
		if err := h.store.Revoke(ctx, rt.workerID); err != nil {
			return err
		}
		h.cfg.Logger.Info("worker revoked", "worker", rt.workerID)
		writeValue(w, http.StatusOK, bridge.RevokeResponse{ProtocolVersion: 1, Revoked: true})
	case "status":
		if !bridge.ValidWorkerID(rt.workerID) || !h.configured(rt.workerID) {
			return bridge.Errorf(http.StatusBadRequest, "Invalid bridge worker")
		}
		st, err := h.store.Worker(ctx, rt.workerID)
		if err != nil {
			return err
		}
		resp := bridge.StatusResponse{ProtocolVersion: 1, WorkerID: rt.workerID, Online: st.Online, Ready: st.Ready}
		if st.Registration != nil {
			ms := max(0, time.Until(st.Registration.ExpiresAt).Milliseconds())
			resp.LeaseExpiresInMs = &ms
			if len(st.Registration.CapabilitiesJSON) > 0 {
				if c, err := bridge.RawFromJSON(st.Registration.CapabilitiesJSON); err == nil {
					resp.Capabilities = c
				}
			}
		}
		writeValue(w, http.StatusOK, resp)
	}
	return nil
}

// handleRedeem is route 1 (unsigned).
func (h *Hub) handleRedeem(w http.ResponseWriter, r *http.Request, raw []byte) error {
	if h.cfg.AuthMode == AuthStatic {
		return errPairingStatic
	}
	o, _, err := bridge.ParseBody(raw)
	if err != nil {
		return bridge.Errorf(http.StatusBadRequest, bridge.MsgInvalidRedeem)
	}
	req, err := bridge.ValidateRedeem(o)
	if err != nil {
		return err
	}
	if !h.configured(req.WorkerID) {
		return bridge.Errorf(http.StatusBadRequest, bridge.MsgInvalidRedeem)
	}
	_, keyErr := bridge.ParsePublicKeyPEM(req.PublicKey)
	cred := bridge.NewSecret()
	exp := time.Now().Add(h.cfg.CredentialTTL)
	if _, err := h.store.RedeemPairing(r.Context(), store.RedeemParams{
		WorkerID: req.WorkerID, CodeHash: bridge.HashSecret(req.Code), PublicKey: req.PublicKey,
		PublicKeyValid: keyErr == nil, CredentialHash: bridge.HashSecret(cred), ExpiresAt: exp,
	}); err != nil {
		return err
	}
	h.cfg.Logger.Info("worker paired", "worker", req.WorkerID)
	writeValue(w, http.StatusOK, bridge.CredentialResponse{ProtocolVersion: 1, WorkerID: req.WorkerID, Credential: cred, ExpiresAt: bridge.FormatTime(exp)})
	return nil
}

// authenticated is the outcome of worker authentication.
type authenticated struct {
	auth       store.Auth
	credential string // the presented credential (paired mode)
}

// authWorker applies §4.2's verification steps (or the static bearer).
func (h *Hub) authWorker(ctx context.Context, r *http.Request, rt route, workerID string, canonical []byte) (*authenticated, error) {
	if h.cfg.AuthMode == AuthStatic {
		tok, ok := httpserve.Bearer(r)
		if !ok || !httpserve.Equal(tok, h.cfg.WorkerToken) || !bridge.ValidWorkerID(workerID) {
			return nil, errAuthRequired
		}
		return &authenticated{}, nil
	}
	proof, ok := bridge.ProofFromHeaders(r.Header)
	if !ok || !bridge.ValidWorkerID(workerID) {
		return nil, errAuthRequired
	}
	ts, err := bridge.ParseTime(proof.Timestamp)
	if err != nil {
		return nil, bridge.ErrProofInvalid
	}
	if skew := time.Since(ts); skew > h.cfg.ClockSkew || skew < -h.cfg.ClockSkew {
		return nil, bridge.ErrProofInvalid
	}
	credHash := bridge.HashSecret(proof.Credential)
	e, fromCache, err := h.workerCredential(ctx, workerID, credHash, confirmedInStore[rt.name])
	if err != nil {
		return nil, err
	}
	cred := e.cred
	path := h.cfg.SignedPathPrefix + bridge.RequestPath(r)
	s := bridge.SigningString(r.Method, path, proof.Timestamp, proof.Nonce, canonical, proof.Credential)
	if !bridge.Verify(e.pub, s, proof.Signature) {
		return nil, bridge.ErrProofInvalid
	}
	if err := h.store.UseNonce(ctx, credHash, bridge.HashSecret(proof.Nonce), ts); err != nil {
		if fromCache {
			err = h.replayOrReset(ctx, workerID, credHash, err)
		}
		return nil, err
	}
	return &authenticated{
		auth:       store.Auth{CredentialHash: credHash, IdentityID: cred.IdentityID, PairingGeneration: cred.PairingGeneration, Binding: cred.Binding},
		credential: proof.Credential,
	}, nil
}

func (h *Hub) serveWorker(w http.ResponseWriter, r *http.Request, rt route, raw []byte) error {
	ctx := r.Context()
	// Without any proof headers there is nothing to verify: 401 before
	// looking at the body.
	if h.cfg.AuthMode == AuthPaired {
		if _, ok := bridge.ProofFromHeaders(r.Header); !ok {
			return errAuthRequired
		}
	} else if _, ok := httpserve.Bearer(r); !ok {
		return errAuthRequired
	}
	o, canonical, err := bridge.ParseBody(raw)
	if err != nil {
		return err
	}
	workerID := rt.workerID
	if rt.name == "register" {
		workerID, _ = func() (string, bool) {
			v, ok := o.Get("workerId")
			s, isStr := v.(string)
			return s, ok && isStr
		}()
	}
	if rt.name == "refresh" && h.cfg.AuthMode == AuthStatic {
		return bridge.ErrCredentialInvalid
	}
	au, err := h.authWorker(ctx, r, rt, workerID, canonical)
	if err != nil {
		return err
	}
	switch rt.name {
	case "register":
		err = h.handleRegister(w, r, o, canonical, au)
	case "lease":
		err = h.handleLease(w, r, workerID, o, au)
	default:
		handle, ok := workerRoutes[rt.name]
		if !ok {
			return errNotFound
		}
		err = handle(h, w, &workerCall{ctx: ctx, workerID: workerID, rt: rt, o: o, canonical: canonical, au: au})
	}
	return h.credentialRefused(ctx, workerID, au, err)
}

// workerCall is one authenticated worker route's request.
type workerCall struct {
	ctx       context.Context
	workerID  string
	rt        route
	o         *bridge.Object
	canonical []byte
	au        *authenticated
}

// workerRoutes are the worker routes past authentication (but register and lease): each validates its
// body, refuses a worker the allow-list does not configure, and applies the protocol step.
var workerRoutes = map[string]func(h *Hub, w http.ResponseWriter, c *workerCall) error{
	"ready":        (*Hub).handleReady,
	"ack":          (*Hub).handleAck,
	"cancellation": (*Hub).handleCancellation,
	"settle":       (*Hub).handleSettle,
	"refresh":      (*Hub).handleRefresh,
	"reset":        (*Hub).handleReset,
}

func (h *Hub) handleReady(w http.ResponseWriter, c *workerCall) error {
	req, err := bridge.ValidateReady(c.o)
	if err != nil {
		return err
	}
	if !h.configured(c.workerID) {
		return errNotConfigured
	}
	if err := h.store.Ready(c.ctx, c.workerID, req.IncarnationID, req.RegistrationGeneration); err != nil {
		return err
	}
	writeValue(w, http.StatusOK, bridge.ReadyResponse{ProtocolVersion: 1, Ready: true})
	return nil
}

func (h *Hub) handleAck(w http.ResponseWriter, c *workerCall) error {
	req, err := bridge.ValidateAck(c.o)
	if err != nil {
		return err
	}
	if !h.configured(c.workerID) {
		return errNotConfigured
	}
	if err := h.store.Ack(c.ctx, store.AckParams{Auth: c.au.auth, WorkerID: c.workerID, AssignmentID: c.rt.assignmentID, IncarnationID: req.IncarnationID,
		Generation: req.Generation, LeaseTokenHash: bridge.HashSecret(req.LeaseToken)}); err != nil {
		return err
	}
	writeValue(w, http.StatusOK, bridge.AcceptedResponse{ProtocolVersion: 1, Accepted: true})
	return nil
}

func (h *Hub) handleCancellation(w http.ResponseWriter, c *workerCall) error {
	req, err := bridge.ValidateCancellation(c.o)
	if err != nil {
		return err
	}
	if !h.configured(c.workerID) {
		return errNotConfigured
	}
	cancelled, err := h.store.Cancelled(c.ctx, c.workerID, req.IncarnationID, c.rt.assignmentID)
	if err != nil {
		return err
	}
	writeValue(w, http.StatusOK, bridge.CancellationResponse{ProtocolVersion: 1, Cancelled: cancelled})
	return nil
}

func (h *Hub) handleSettle(w http.ResponseWriter, c *workerCall) error {
	req, err := bridge.ValidateSettlement(c.o)
	if err != nil {
		return err
	}
	if !h.configured(c.workerID) {
		return errNotConfigured
	}
	if err := h.store.Settle(c.ctx, store.SettleParams{Auth: c.au.auth, WorkerID: c.workerID, AssignmentID: c.rt.assignmentID, IncarnationID: req.IncarnationID,
		Generation: req.Generation, LeaseTokenHash: bridge.HashSecret(req.LeaseToken), IdentityID: c.au.auth.IdentityID,
		Status: req.Status, Canonical: c.canonical}); err != nil {
		return err
	}
	writeValue(w, http.StatusOK, bridge.AcceptedResponse{ProtocolVersion: 1, Accepted: true})
	return nil
}

func (h *Hub) handleRefresh(w http.ResponseWriter, c *workerCall) error {
	if err := bridge.ValidateRefresh(c.o); err != nil {
		return err
	}
	if !h.configured(c.workerID) {
		return errNotConfigured
	}
	cred := bridge.NewSecret()
	exp := time.Now().Add(h.cfg.CredentialTTL)
	if err := h.store.RefreshCredential(c.ctx, c.workerID, c.au.auth.CredentialHash, bridge.HashSecret(cred), exp); err != nil {
		return err
	}
	writeValue(w, http.StatusOK, bridge.CredentialResponse{ProtocolVersion: 1, WorkerID: c.workerID, Credential: cred, ExpiresAt: bridge.FormatTime(exp)})
	return nil
}

func (h *Hub) handleReset(w http.ResponseWriter, c *workerCall) error {
	req, err := bridge.ValidateReset(c.o)
	if err != nil {
		return err
	}
	if !h.configured(c.workerID) {
		return errNotConfigured
	}
	if err := h.store.ResetWorkspace(c.ctx, c.workerID, req.IncarnationID, req.RuntimeSessionID); err != nil {
		return err
	}
	writeValue(w, http.StatusOK, bridge.ResetResponse{ProtocolVersion: 1, Reset: true})
	return nil
}

func (h *Hub) handleRegister(w http.ResponseWriter, r *http.Request, o *bridge.Object, canonical []byte, au *authenticated) error {
	req, capsObj, err := bridge.ValidateRegister(o)
	if err != nil {
		return err
	}
	if !h.configured(req.WorkerID) {
		return errNotConfigured
	}
	capsJSON, err := bridge.Canonical(capsObj)
	if err != nil {
		return bridge.Errorf(http.StatusBadRequest, bridge.MsgInvalidRegistration)
	}
	reg, err := h.store.Register(r.Context(), store.RegisterParams{
		WorkerID: req.WorkerID, IncarnationID: req.IncarnationID, Capabilities: req.Capabilities,
		CapabilitiesJSON: capsJSON, Auth: au.auth, Slots: req.Capabilities.WorkspaceLeaseSlots,
	})
	if err != nil {
		return err
	}
	resp := bridge.RegisterResponse{
		ProtocolVersion: 1, WorkerID: req.WorkerID, IncarnationID: req.IncarnationID,
		RegistrationGeneration: reg.Generation, RegisteredAt: bridge.FormatTime(reg.RegisteredAt),
		LeaseTTLMs: reg.LeaseTTL.Milliseconds(),
	}
	if req.Capabilities.WorkspaceLeaseSlots > 0 {
		resp.WorkspaceLeaseSlots = reg.Slots // the receipt a worker needs before leasing in parallel
	}
	resp.FillSupported()
	writeValue(w, http.StatusOK, resp)
	return nil
}

// handleLease is route 4: a long poll for the incarnation's next assignment.
func (h *Hub) handleLease(w http.ResponseWriter, r *http.Request, workerID string, o *bridge.Object, au *authenticated) error {
	start := time.Now()
	req, waitMs, err := bridge.ValidateLease(o)
	if err != nil {
		return err
	}
	if !h.configured(workerID) {
		return errNotConfigured
	}
	until := start.Add(time.Duration(waitMs) * time.Millisecond)
	ctx := r.Context()
	lp := store.LeaseParams{WorkerID: workerID, IncarnationID: req.IncarnationID, IdentityID: au.auth.IdentityID, Auth: au.auth, Slot: -1}
	if req.WorkspaceLeaseSlot != nil {
		lp.Slot = int(*req.WorkspaceLeaseSlot)
	}
	for {
		// Watch before reading, so that work queued after the read wakes this poll.
		ch, queued, release := h.waits.watchHint(store.TopicWorker(workerID))
		a, err := h.store.LeaseSlot(ctx, lp)
		if err != nil {
			release()
			if errors.Is(err, context.Canceled) {
				return nil // the worker went away; its claim is redelivered
			}
			return err
		}
		if a != nil {
			release()
			body, err := bridge.RawFromJSON(a.Request)
			if err != nil {
				return err
			}
			resp := bridge.LeaseResponse{ProtocolVersion: 1, Assignment: &bridge.Assignment{
				ProtocolVersion: 1, AssignmentID: a.ID, WorkerID: a.WorkerID, IncarnationID: a.IncarnationID,
				Generation: a.Generation, LeaseToken: a.LeaseToken, ExpiresAt: bridge.FormatTime(a.ExpiresAt),
				RemainingMs: max(0, time.Until(a.ExpiresAt).Milliseconds()), RuntimeSessionID: a.RuntimeSessionID,
				Request: body,
			}}
			if a.ExecutionKind != "" && a.ExecutionKind != bridge.KindSandbox {
				resp.Assignment.ExecutionKind = a.ExecutionKind
			}
			if lp.Slot >= 0 {
				resp.Assignment.WorkspaceLeaseSlot = &lp.Slot
			}
			resp.ServerElapsedMs = time.Since(start).Milliseconds()
			h.metrics.LeaseWait.WithLabelValues("assignment").Observe(time.Since(start).Seconds())
			writeValue(w, http.StatusOK, resp)
			return nil
		}
		woke := time.Now().Before(until) && h.sleep(ctx, ch, min(h.cfg.PollInterval, time.Until(until)))
		release()
		if !woke {
			break
		}
		select {
		case <-ch:
			lp.Woken, lp.Queued = true, queued() // work was queued: go straight to the transaction
		default:
			lp.Woken, lp.Queued = false, ""
		}
	}
	h.metrics.LeaseWait.WithLabelValues("empty").Observe(time.Since(start).Seconds())
	writeValue(w, http.StatusOK, bridge.LeaseResponse{ProtocolVersion: 1, ServerElapsedMs: time.Since(start).Milliseconds()})
	return nil
}
