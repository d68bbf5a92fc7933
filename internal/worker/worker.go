package worker

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/codellm/codellm/internal/bridge"
	"github.com/codellm/codellm/internal/workspace"
)

// Timing holds §6.7's constants. Zero fields take the spec values; tests shorten them.
type Timing struct {
	LeaseWait          time.Duration // waitMs sent with every lease (25 s; the hub caps it at 30 s)
	LeaseGrace         time.Duration // added to LeaseWait for the transport timeout (5 s)
	RequestTimeout     time.Duration // ack, ready, reset, refresh, settle attempt (10 s)
	RetryStep          time.Duration // settle, heartbeat and credential retry step (100 ms)
	RejectionGrace     time.Duration // settle deadline of unexecuted rejections (30 s)
	RefreshWindow      time.Duration // refresh when the credential expires within this (60 s)
	InitialClockOffset time.Duration // serverClockOffset before the first registration (+60 s)
	ReconnectBase      time.Duration // 1 s
	ReconnectCap       time.Duration // 30 s
	CancelPoll         time.Duration // 500 ms
	CancelTimeout      time.Duration // 2 s
}

func (t *Timing) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&t.LeaseWait, 25*time.Second)
	def(&t.LeaseGrace, 5*time.Second)
	def(&t.RequestTimeout, 10*time.Second)
	def(&t.RetryStep, 100*time.Millisecond)
	def(&t.RejectionGrace, 30*time.Second)
	def(&t.RefreshWindow, 60*time.Second)
	def(&t.InitialClockOffset, 60*time.Second)
	def(&t.ReconnectBase, time.Second)
	def(&t.ReconnectCap, 30*time.Second)
	def(&t.CancelPoll, 500*time.Millisecond)
	def(&t.CancelTimeout, 2*time.Second)
	if t.InitialClockOffset < 0 { // explicit "start from zero"
		t.InitialClockOffset = 0
	}
}

// Config configures one worker process.
type Config struct {
	BaseURL  string // hub base URL, e.g. https://hub.example.com/v1
	WorkerID string

	// Paired mode: the identity and where rotations are persisted (before first use).
	Identity     *Identity
	IdentityPath string
	// Static mode (development): a shared bearer token; Identity is then unused.
	StaticToken string

	Supervisor     Supervisor
	SandboxProfile string   // default: the supervisor's label
	Runtimes       []string // capability labels
	PolicyDigest   string   // optional
	RequireReady   bool
	// LeaseSlots asks the hub for that many lease slots (capabilities.workspaceLeaseSlots): the worker
	// then runs as many assignments at once, each slot long-polling on its own (slots.go). ≤ 1: one at a
	// time, the protocol's default.
	LeaseSlots int

	// Workspace tools: one registered directory, or nil.
	Workspace     *workspace.Workspace
	WorkspaceID   string
	WorkspaceName string
	// MarkerPath is the mutation quarantine marker; required when the workspace can mutate.
	MarkerPath string

	HTTPClient *http.Client
	Log        io.Writer // "codellm worker: …" lines; nil discards
	Timing     Timing
}

// Worker is one incarnation of a worker: created once per process, it registers under a fresh
// incarnation ID.
type Worker struct {
	cfg         Config
	base        string
	client      *http.Client
	incarnation string
	priv        ed25519.PrivateKey

	credMu     sync.RWMutex
	credential string
	expiresAt  time.Time
	identity   Identity

	mu         sync.Mutex
	offset     time.Duration // serverClockOffset
	leaseTTL   time.Duration
	want       bridge.Capabilities
	compat     bridge.Capabilities
	active     bridge.Capabilities
	negotiated bool
	connected  bool // see Connected

	markerArmed atomic.Bool
	logMu       sync.Mutex

	// abandoned are the assignments this incarnation acknowledged and left unsettled on purpose (an
	// ambiguous stateful run, its session quarantined), by local deadline: the hub redelivers them to
	// every lease until they expire, and they must never run again. Lease slots (slots.go) read and
	// write it concurrently: abandonedMu guards it.
	abandonedMu sync.Mutex
	abandoned   map[string]time.Time
	// granted is the hub's lease slot grant (0: none asked, or a hub without slots); registered is when
	// the last registration went through (unix nanos).
	granted, registered atomic.Int64
}

// New validates cfg and creates an incarnation.
func New(cfg Config) (*Worker, error) {
	cfg.Timing.defaults()
	base := strings.TrimRight(cfg.BaseURL, "/")
	if base == "" && cfg.Identity != nil {
		base = strings.TrimRight(cfg.Identity.CodeAPIURL, "/")
	}
	if err := checkHubURL(base); err != nil {
		return nil, err
	}
	if !bridge.ValidWorkerID(cfg.WorkerID) {
		return nil, fmt.Errorf("%w: invalid worker ID %q", ErrConfig, cfg.WorkerID)
	}
	if cfg.Supervisor == nil {
		return nil, fmt.Errorf("%w: no runtime supervisor", ErrConfig)
	}
	w := &Worker{cfg: cfg, base: base, client: cfg.HTTPClient, incarnation: bridge.NewID(),
		offset: cfg.Timing.InitialClockOffset, leaseTTL: 60 * time.Second}
	if w.client == nil {
		w.client = &http.Client{}
	}
	if cfg.StaticToken == "" {
		if cfg.Identity == nil {
			return nil, fmt.Errorf("%w: paired mode needs an identity (pair first) or a static worker token", ErrConfig)
		}
		if err := cfg.Identity.Validate(); err != nil {
			return nil, err
		}
		if cfg.Identity.WorkerID != cfg.WorkerID {
			return nil, fmt.Errorf("%w: identity is for worker %q, not %q", ErrConfig, cfg.Identity.WorkerID, cfg.WorkerID)
		}
		if cfg.IdentityPath == "" {
			return nil, fmt.Errorf("%w: paired mode needs the identity path to persist rotations", ErrConfig)
		}
		w.identity = *cfg.Identity
		w.priv = cfg.Identity.PrivateKeyValue()
		w.credential = cfg.Identity.Credential
		w.expiresAt, _ = bridge.ParseTime(cfg.Identity.ExpiresAt)
	}
	if cfg.SandboxProfile == "" {
		cfg.SandboxProfile = cfg.Supervisor.Label()
	}
	w.want = bridge.Capabilities{StatefulWorkspace: cfg.Supervisor.Stateful(), SandboxProfile: cfg.SandboxProfile,
		Runtimes: slices.Clone(cfg.Runtimes), PolicyDigest: cfg.PolicyDigest, RequiresReadyConfirmation: cfg.RequireReady}
	if w.want.Runtimes == nil {
		w.want.Runtimes = []string{}
	}
	if err := w.wantSlots(cfg); err != nil {
		return nil, err
	}
	if ws := cfg.Workspace; ws != nil {
		if !bridge.ValidWorkerID(cfg.WorkspaceID) {
			return nil, fmt.Errorf("%w: invalid workspace ID %q", ErrConfig, cfg.WorkspaceID)
		}
		name := cfg.WorkspaceName
		if strings.TrimSpace(name) == "" {
			name = cfg.WorkspaceID
		}
		ops := ws.Operations()
		mutating := slices.ContainsFunc(ops, isMutation)
		if mutating && cfg.MarkerPath == "" {
			// §8.1: mutating operations are never advertised without durable quarantine storage.
			return nil, fmt.Errorf("%w: a writable or command-enabled workspace needs a quarantine marker path", ErrConfig)
		}
		wt := &bridge.WorkspaceTools{ProtocolVersion: 1, Operations: ops,
			Workspaces:       []bridge.Workspace{{ID: cfg.WorkspaceID, Name: name, Operations: slices.Clone(ops)}},
			ListFileFeatures: []string{"after_path"}}
		if ws.Writable() {
			wt.WriteFileModes = slices.Clone(bridge.SupportedWriteFileModes)
			wt.EditFileModes = slices.Clone(bridge.SupportedEditFileModes)
			wt.EditFileFeatures = slices.Clone(bridge.SupportedEditFileFeatures)
		}
		w.want.WorkspaceTools = wt
	}
	w.cfg = cfg
	w.compat = bridge.CompatibleCapabilities(w.want)
	w.active = w.compat
	return w, nil
}

// Registered reports whether this incarnation's registration has been accepted by the hub at least once.
func (w *Worker) Registered() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.negotiated
}

// Connected reports whether the worker's last exchange with the hub went through: set when a
// registration succeeds (every cycle re-registers before it leases), cleared when a cycle's refresh,
// registration or lease fails and the worker backs off to reconnect. A worker that is Registered but not Connected cannot be handed work.
func (w *Worker) Connected() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.connected
}

func (w *Worker) setConnected(ok bool) {
	w.mu.Lock()
	w.connected = ok
	w.mu.Unlock()
}

// IncarnationID returns this process's incarnation.
func (w *Worker) IncarnationID() string { return w.incarnation }

// ActiveCapabilities returns the last registration the hub accepted.
func (w *Worker) ActiveCapabilities() bridge.Capabilities {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.active
}

// Credential returns the credential in use (tests observe rotations with it).
func (w *Worker) Credential() string {
	w.credMu.RLock()
	defer w.credMu.RUnlock()
	return w.credential
}

func (w *Worker) logf(format string, a ...any) {
	if w.cfg.Log == nil {
		return
	}
	w.logMu.Lock()
	defer w.logMu.Unlock()
	fmt.Fprintf(w.cfg.Log, "codellm worker: "+format+"\n", a...)
}

func isMutation(op string) bool {
	return op == workspace.OpWriteFile || op == workspace.OpEditFile || op == workspace.OpExecuteCommand
}

// Backoff is §6.5's reconnect delay: floor(min(cap, base·2^attempt)·(0.5+0.5·r)) with r ∈ [0,1).
func Backoff(attempt int, r float64, base, limit time.Duration) time.Duration {
	d := float64(limit)
	if attempt < 62 {
		d = math.Min(float64(limit), float64(base)*math.Pow(2, float64(attempt)))
	}
	return time.Duration(math.Floor(d * (0.5 + 0.5*r)))
}

// PolicyDigest is §8.1's hex(sha256(policy ‖ extra)); extra is empty unless commands are enabled.
func PolicyDigest(policy string, commands bool, domains []string) string {
	if policy == "" {
		policy = "default-deny"
	}
	s := policy
	if commands {
		d := slices.Clone(domains)
		sort.Strings(d)
		d = slices.Compact(d)
		s += "\x00codellm-embedded\x00" + strings.Join(d, "\x00")
	}
	return bridge.SHA256Hex([]byte(s))
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Run is the main loop (§6.2) until drain is cancelled (no new lease; a running assignment still settles
// within its deadline) or hard is cancelled (abort at once). It returns nil after a clean stop, or an
// error for ExitCode.
func (w *Worker) Run(drain, hard context.Context) error {
	if w.cfg.MarkerPath != "" {
		if err := CheckMarker(w.cfg.MarkerPath); err != nil {
			return err
		}
	}
	if w.cfg.LeaseSlots > 1 {
		return w.runSlots(drain, hard)
	}
	return w.loop(drain, hard, -1)
}

// loop is one lease slot's main loop (slot -1: the worker's only one).
func (w *Worker) loop(drain, hard context.Context, slot int) error {
	attempt := 0
	for {
		if drain.Err() != nil || hard.Err() != nil {
			return nil
		}
		leased, err := w.cycle(drain, hard, slot)
		if leased {
			attempt = 0
		}
		if err == nil {
			continue
		}
		if f := fatal(err); f != nil {
			return f
		}
		if drain.Err() != nil || hard.Err() != nil {
			return nil
		}
		if !leased {
			w.setConnected(false) // refresh, registration or lease failed: the hub is out of reach
		}
		w.logf("reconnecting after %v", err)
		if !sleepCtx(drain, Backoff(attempt, rand.Float64(), w.cfg.Timing.ReconnectBase, w.cfg.Timing.ReconnectCap)) {
			return nil
		}
		attempt++
	}
}

// cycle is one pass: refresh, register (and ready), lease, and the assignment if one came. A slot of
// several registers only when the worker's last registration is older than slotRegisterEvery (the slots
// share it).
func (w *Worker) cycle(drain, hard context.Context, slot int) (leased bool, err error) {
	if err := w.refreshIfDue(drain); err != nil {
		return false, err
	}
	if slot < 0 || time.Since(time.Unix(0, w.registered.Load())) > slotRegisterEvery {
		if err := w.register(drain, false); err != nil {
			return false, err
		}
	}
	w.setConnected(true)
	a, err := w.lease(drain, slot)
	if err != nil {
		return false, err
	}
	if a == nil {
		return true, nil
	}
	return true, w.handle(hard, a)
}

// ---- credentials ------------------------------------------------------------------------------------

func (w *Worker) refreshDue() bool {
	if w.cfg.StaticToken != "" {
		return false
	}
	w.credMu.RLock()
	exp := w.expiresAt
	w.credMu.RUnlock()
	return w.dueAt(exp)
}

// dueAt is §4.2's refresh condition for a credential expiring at exp.
func (w *Worker) dueAt(exp time.Time) bool {
	return !exp.After(time.Now().Add(w.clockOffset() + w.cfg.Timing.RefreshWindow))
}

// refreshIfDue rotates the credential when it is due. The condition is checked again under the write
// lock, so callers that race (the main loop, the pre-run step, the upkeep task) rotate only once.
func (w *Worker) refreshIfDue(ctx context.Context) error {
	if !w.refreshDue() {
		return nil
	}
	return w.rotate(ctx)
}

// rotate is §4.2's credential refresh: the new identity is persisted before the new credential is used,
// and a malformed reply or a failed write is fatal (exit 3), because the old credential is already dead.
//
// The hub kills the old credential the moment it commits the rotation, so a refresh request, once sent,
// must be seen through to its reply: abandoning it (because the run it was keeping alive ended, a deadline
// passed or the worker is draining) would leave the worker holding a dead credential, and its next request
// (typically the settlement) would fail with CREDENTIAL_INVALID. ctx therefore decides only whether a
// refresh starts; the request itself is bounded by the request timeout alone.
func (w *Worker) rotate(ctx context.Context) error {
	w.credMu.Lock()
	defer w.credMu.Unlock()
	if !w.dueAt(w.expiresAt) {
		return nil // a concurrent caller rotated first
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("credential refresh not started: %w", err)
	}
	body, _ := bridge.Marshal(bridge.RefreshRequest{ProtocolVersion: 1})
	var cr bridge.CredentialResponse
	if err := w.send(context.WithoutCancel(ctx), bridge.PathRefresh(w.cfg.WorkerID), body, w.cfg.Timing.RequestTimeout, &cr, w.credential); err != nil {
		if errors.Is(err, ErrProtocol) {
			return errors.Join(ErrAuth, err)
		}
		return err
	}
	threshold := time.Now().Add(w.clockOffset() + w.cfg.Timing.RefreshWindow)
	exp, perr := bridge.ParseTime(cr.ExpiresAt)
	switch {
	case cr.WorkerID != w.cfg.WorkerID:
		return fmt.Errorf("%w: refreshed credential is for worker %q", ErrAuth, cr.WorkerID)
	case !bridge.ValidToken(cr.Credential):
		return fmt.Errorf("%w: refreshed credential is too short", ErrAuth)
	case perr != nil || !exp.After(threshold):
		return fmt.Errorf("%w: refreshed credential expiresAt %q is not after the refresh threshold", ErrAuth, cr.ExpiresAt)
	}
	id := w.identity
	id.Credential, id.ExpiresAt = cr.Credential, cr.ExpiresAt
	if err := SaveIdentity(w.cfg.IdentityPath, &id); err != nil {
		return fmt.Errorf("%w: persisting the rotated credential: %v", ErrAuth, err)
	}
	w.identity = id
	w.credential, w.expiresAt = cr.Credential, exp
	w.logf("credential rotated, expires %s", cr.ExpiresAt)
	return nil
}

func (w *Worker) clockOffset() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.offset
}

func (w *Worker) setOffset(d time.Duration) {
	w.mu.Lock()
	w.offset = d
	w.mu.Unlock()
}

// ---- registration -----------------------------------------------------------------------------------

func capsEqual(a, b bridge.Capabilities) bool {
	x, err1 := bridge.Marshal(a)
	y, err2 := bridge.Marshal(b)
	return err1 == nil && err2 == nil && string(x) == string(y)
}

func (w *Worker) registerOnce(ctx context.Context, caps bridge.Capabilities) (*bridge.RegisterResponse, error) {
	body, err := bridge.Marshal(bridge.RegisterRequest{ProtocolVersion: 1, WorkerID: w.cfg.WorkerID, IncarnationID: w.incarnation, Capabilities: caps})
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	timeout := min(w.cfg.Timing.RequestTimeout, w.leaseTTL-time.Millisecond)
	w.mu.Unlock()
	sent := time.Now()
	var rr bridge.RegisterResponse
	if err := w.do(ctx, bridge.PathRegister(), body, timeout, &rr); err != nil {
		return nil, err
	}
	if rr.IncarnationID != w.incarnation {
		return nil, fmt.Errorf("%w: registration reply names incarnation %q", ErrProtocol, rr.IncarnationID)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if t, err := bridge.ParseTime(rr.RegisteredAt); err == nil {
		w.offset = t.Sub(sent)
	}
	if rr.LeaseTTLMs > 0 {
		w.leaseTTL = time.Duration(rr.LeaseTTLMs) * time.Millisecond
	}
	w.granted.Store(int64(rr.WorkspaceLeaseSlots))
	w.registered.Store(time.Now().UnixNano())
	return &rr, nil
}

func (w *Worker) setActive(c bridge.Capabilities) {
	w.mu.Lock()
	w.active = c
	w.mu.Unlock()
}

// register is §8.2: the compatible set first, then the negotiated set; later registrations (heartbeats
// too) send the active set and fall back to the compatible set once on a 400. The quarantine marker is
// checked first, except by heartbeats while this incarnation's own mutation guard is armed.
func (w *Worker) register(ctx context.Context, heartbeat bool) error {
	if w.cfg.MarkerPath != "" && !(heartbeat && w.markerArmed.Load()) {
		if err := CheckMarker(w.cfg.MarkerPath); err != nil {
			return err
		}
	}
	w.mu.Lock()
	negotiated, active := w.negotiated, w.active
	w.mu.Unlock()
	var rr *bridge.RegisterResponse
	var err error
	if !negotiated {
		if rr, err = w.registerOnce(ctx, w.compat); err != nil {
			return err
		}
		w.setActive(w.compat)
		neg := bridge.NegotiateCapabilities(w.want, rr)
		if !capsEqual(neg, w.compat) {
			rr2, err2 := w.registerOnce(ctx, neg)
			switch {
			case err2 == nil:
				w.setActive(neg)
				rr = rr2
			case fatal(err2) != nil:
				return err2
			default:
				// The first registration stands with the compatible set.
				w.logf("negotiated registration refused (%v); serving the compatible set", err2)
			}
		}
		w.mu.Lock()
		w.negotiated = true
		w.mu.Unlock()
		w.logf("registered incarnation %s (registration generation %d)", w.incarnation, rr.RegistrationGeneration)
	} else {
		rr, err = w.registerOnce(ctx, active)
		if err != nil && statusOf(err) == http.StatusBadRequest && !capsEqual(active, w.compat) {
			w.logf("registration refused with 400; falling back to the compatible set")
			if rr, err = w.registerOnce(ctx, w.compat); err == nil {
				w.setActive(w.compat)
			}
		}
		if err != nil {
			return err
		}
	}
	if w.cfg.RequireReady {
		body, _ := bridge.Marshal(bridge.ReadyRequest{ProtocolVersion: 1, IncarnationID: w.incarnation, RegistrationGeneration: rr.RegistrationGeneration})
		var rdy bridge.ReadyResponse
		if err := w.do(ctx, bridge.PathReady(w.cfg.WorkerID), body, w.cfg.Timing.RequestTimeout, &rdy); err != nil {
			return err
		}
		if !rdy.Ready {
			return fmt.Errorf("%w: ready reply without ready:true", ErrProtocol)
		}
	}
	return nil
}

// ---- lease and ack ----------------------------------------------------------------------------------

// lease long-polls once (§3.5) for slot (-1: none named) and returns an assignment with remainingMs
// already reduced by the transport time, or nil.
func (w *Worker) lease(ctx context.Context, slot int) (*bridge.Assignment, error) {
	waitMs := float64(w.cfg.Timing.LeaseWait.Milliseconds())
	req := bridge.LeaseRequest{ProtocolVersion: 1, WaitMs: &waitMs, IncarnationID: w.incarnation}
	if slot >= 0 {
		s := float64(slot)
		req.WorkspaceLeaseSlot = &s
	}
	body, _ := bridge.Marshal(req)
	start := time.Now()
	var lr bridge.LeaseResponse
	if err := w.do(ctx, bridge.PathLease(w.cfg.WorkerID), body, w.cfg.Timing.LeaseWait+w.cfg.Timing.LeaseGrace, &lr); err != nil {
		return nil, err
	}
	a := lr.Assignment
	if lr.ServerElapsedMs < 0 || lr.ServerElapsedMs > bridge.MaxSafeInteger {
		return nil, fmt.Errorf("%w: serverElapsedMs %d", ErrProtocol, lr.ServerElapsedMs)
	}
	if a == nil {
		return nil, nil
	}
	switch {
	case a.IncarnationID != w.incarnation:
		return nil, fmt.Errorf("%w: assignment for incarnation %q", ErrProtocol, a.IncarnationID)
	case a.RemainingMs < 0 || a.RemainingMs > bridge.MaxSafeInteger:
		return nil, fmt.Errorf("%w: remainingMs %d", ErrProtocol, a.RemainingMs)
	case !bridge.ValidAssignmentID(a.AssignmentID) || a.Generation < 1 || !bridge.ValidToken(a.LeaseToken):
		return nil, fmt.Errorf("%w: malformed assignment", ErrProtocol)
	case a.Kind() != bridge.KindSandbox && a.Kind() != bridge.KindWorkspaceTool:
		return nil, fmt.Errorf("%w: unknown executionKind %q", ErrProtocol, a.ExecutionKind)
	case (slot >= 0) != (a.WorkspaceLeaseSlot != nil) || (slot >= 0 && *a.WorkspaceLeaseSlot != slot):
		return nil, fmt.Errorf("%w: assignment for another lease slot", ErrProtocol)
	}
	transport := max(0, time.Since(start)-time.Duration(lr.ServerElapsedMs)*time.Millisecond)
	a.RemainingMs = max(0, a.RemainingMs-transport.Milliseconds())
	return a, nil
}

const (
	msgAckAmbiguous = "Bridge lease acknowledgement delivery was ambiguous"
	msgAckExpired   = "Bridge assignment expired during lease acknowledgement"
)

// handle acknowledges and runs one assignment (§6.2 steps 5–6).
func (w *Worker) handle(hard context.Context, a *bridge.Assignment) error {
	if w.isAbandoned(a.AssignmentID) {
		// Redelivered until the hub sees it expire (its clock may be a little behind ours): never again.
		sleepCtx(hard, w.cfg.Timing.RetryStep)
		return nil
	}
	ackStart := time.Now()
	body, _ := bridge.Marshal(bridge.AckRequest{ProtocolVersion: 1, IncarnationID: w.incarnation, Generation: a.Generation, LeaseToken: a.LeaseToken})
	err := w.do(hard, bridge.PathAck(w.cfg.WorkerID, a.AssignmentID), body, w.cfg.Timing.RequestTimeout, &bridge.AcceptedResponse{})
	if err != nil {
		if f := fatal(err); f != nil {
			return f
		}
		if !transient(err) {
			// A definite refusal: the hub will not let us run it, and nothing ran.
			return fmt.Errorf("assignment %s refused at ack: %w", a.AssignmentID, err)
		}
		w.logf("ack of %s was ambiguous (%v); settling a rejection", a.AssignmentID, err)
		return w.rejectUnexecuted(hard, a, msgAckAmbiguous)
	}
	remaining := time.Duration(a.RemainingMs)*time.Millisecond - time.Since(ackStart)
	if remaining <= 0 {
		return w.rejectUnexecuted(hard, a, msgAckExpired)
	}
	return w.execute(hard, a, remaining)
}

// rejectUnexecuted settles a rejection for an assignment that never ran, within the rejection grace,
// with recovery heartbeats (§6.2).
func (w *Worker) rejectUnexecuted(hard context.Context, a *bridge.Assignment, msg string) error {
	j := w.newJob(hard, a, time.Now())
	defer j.stop()
	j.recovery.Store(true)
	err := w.settle(hard, a, rejection(a, w.incarnation, msg, ""), time.Now().Add(w.cfg.Timing.RejectionGrace))
	if f := j.fatalErr(); f != nil {
		return f
	}
	if err != nil {
		if f := fatal(err); f != nil {
			return f
		}
		return fmt.Errorf("settling rejection of %s: %w", a.AssignmentID, err)
	}
	return nil
}

func rejection(a *bridge.Assignment, inc, msg, code string) bridge.Settlement {
	m := bridge.TruncateError(msg)
	return bridge.Settlement{ProtocolVersion: 1, Generation: a.Generation, LeaseToken: a.LeaseToken, IncarnationID: inc,
		Status: bridge.StatusRejected, Error: &m, ErrorCode: code}
}

func fulfillment(a *bridge.Assignment, inc string, result *bridge.Object) bridge.Settlement {
	return bridge.Settlement{ProtocolVersion: 1, Generation: a.Generation, LeaseToken: a.LeaseToken, IncarnationID: inc,
		Status: bridge.StatusFulfilled, Result: bridge.NewRaw(result)}
}

// settle sends one settlement, serialised once (§4.3 rule 9), retrying transient failures every retry
// step until `until`. Any other 4xx is final.
func (w *Worker) settle(ctx context.Context, a *bridge.Assignment, s bridge.Settlement, until time.Time) error {
	body, err := bridge.Marshal(s)
	if err != nil {
		return err
	}
	var last error
	for {
		left := time.Until(until)
		if left <= 0 {
			if last == nil {
				last = errors.New("settlement deadline passed before any attempt")
			}
			return fmt.Errorf("settlement not delivered: %w", last)
		}
		last = w.do(ctx, bridge.PathSettle(w.cfg.WorkerID, a.AssignmentID), body, min(w.cfg.Timing.RequestTimeout, left), &bridge.AcceptedResponse{})
		if last == nil {
			return nil
		}
		if !transient(last) || ctx.Err() != nil {
			return last
		}
		if !sleepCtx(ctx, min(w.cfg.Timing.RetryStep, time.Until(until))) {
			return last
		}
	}
}
