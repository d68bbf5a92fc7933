// Package server is codellm's HTTP service: the OpenAI-compatible chat endpoint (openai-contract §1–§13),
// the Responses API routes (served by internal/responses), models, health, readiness and metrics, with
// authentication, the listener safety rule, TLS/mTLS, request
// logging and graceful shutdown. It owns no execution logic: requests go through internal/engine, and
// errors become the OpenAI envelope in exactly one place (apiError).
package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/codellm/codellm/internal/chat"
	"github.com/codellm/codellm/internal/engine"
	"github.com/codellm/codellm/internal/httpguard"
	"github.com/codellm/codellm/internal/httpserve"
	"github.com/codellm/codellm/internal/idempotency"
	"github.com/codellm/codellm/internal/interp"
	"github.com/codellm/codellm/internal/listen"
	"github.com/codellm/codellm/internal/metrics"
	"github.com/codellm/codellm/internal/openai"
	"github.com/codellm/codellm/internal/responses"
	"github.com/codellm/codellm/internal/sandbox"
	"github.com/codellm/codellm/internal/sealform"
)

// Config holds the service's own settings; execution settings live in engine.Config.
type Config struct {
	Listen         string
	APIKey         string
	TLSCert        string
	TLSKey         string
	ClientCA       string
	InsecurePublic bool
	DebugExtension bool          // honour x_codellm_debug (§13)
	MaxBodyBytes   int64         // --max-body-bytes (default 10 MiB)
	RetryAfter     time.Duration // Retry-After on 429 (default 5 s)
	KillGrace      time.Duration // added to the run timeout when draining (default 5 s)
	Logger         *slog.Logger
	Version        string
	Network        bool // reported by /readyz
	// AllowedHosts and AllowedOrigins extend the Host and Origin rules (--allowed-hosts,
	// --allowed-origins); Limits are the listener's timeouts and connection cap (httpguard).
	AllowedHosts   []string
	AllowedOrigins []string
	Limits         httpguard.Limits
	// Idempotency, when set, makes the code-running routes honour Idempotency-Key and Stainless retries
	// (see internal/idempotency); the server fills in its Credential, Detach, MaxBody and OnEvent.
	Idempotency *idempotency.Guard
	// Responses bounds the stored responses of the Responses API (--responses-*; zero values: defaults).
	Responses responses.StoreConfig
	// SealPath is where the sealing form is served behind the listener's authentication (--seal-path,
	// trip2g's CODELLM_SEAL_PATH; default sealform.DefaultPath).
	SealPath string
}

// Server is one codellm service instance.
type Server struct {
	cfg       Config
	eng       *engine.Engine
	chat      *chat.Service
	responses *responses.Service
	sb        *sandbox.Sandbox
	programs  *interp.Programs
	metrics   *metrics.Service
	log       *slog.Logger
	handler   http.Handler
	router    *httpserve.Router
	guarded   http.Handler // the router behind the Host and Origin rules
	guard     *httpguard.Policy

	draining atomic.Bool
	baseCtx  atomic.Value // context.Context of runs, set by Serve (cancelled after the drain grace)
	check    atomic.Pointer[selfCheck]
}

type selfCheck struct {
	done   bool
	ok     bool
	reason string
}

type routeHandler struct {
	name string // route label for metrics
	auth bool
	h    func(w http.ResponseWriter, r *http.Request, rl *reqLog)
}

// New validates the configuration (listener safety, TLS files) and builds the service. ecfg is the
// execution configuration; the engine is created here so that it sees this server's self-check.
func New(cfg Config, ecfg engine.Config, sb *sandbox.Sandbox) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 10 << 20
	}
	if cfg.RetryAfter <= 0 {
		cfg.RetryAfter = 5 * time.Second
	}
	if cfg.KillGrace <= 0 {
		cfg.KillGrace = 5 * time.Second
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:8080"
	}
	if (cfg.TLSCert == "") != (cfg.TLSKey == "") {
		return nil, errors.New("--tls-cert and --tls-key must be given together")
	}
	if cfg.ClientCA != "" && cfg.TLSCert == "" {
		return nil, errors.New("--client-ca requires --tls-cert and --tls-key (mutual TLS needs a TLS listener)")
	}
	if err := listen.CheckPublic(cfg.Listen, cfg.APIKey != "" || cfg.ClientCA != "", cfg.InsecurePublic); err != nil {
		return nil, err
	}
	if cfg.SealPath == "" {
		cfg.SealPath = sealform.DefaultPath
	}
	if err := sealform.CheckPath(cfg.SealPath); err != nil {
		return nil, fmt.Errorf("--seal-path: %w", err)
	}
	s := &Server{cfg: cfg, sb: sb, programs: ecfg.Programs, log: cfg.Logger,
		guard: httpguard.ForListener(cfg.Listen, cfg.AllowedHosts, cfg.AllowedOrigins)}
	s.check.Store(&selfCheck{reason: "startup self-check has not finished"})
	if ecfg.Slots != nil {
		s.metrics = metrics.NewService(func() float64 { return float64(ecfg.Slots.InFlight()) })
	} else {
		s.metrics = metrics.NewService(func() float64 { return 0 })
	}
	ecfg.Pipeline.Kills = s.metrics // the execution core counts every block a limit or codellm ends
	s.eng = engine.New(ecfg, s.sandboxReady)
	// Workdirs (code and delivery bags) a crashed server left behind are removed before serving.
	s.eng.SweepStale(s.log)
	registerSerial(s.metrics, sb)
	s.chat = chat.New(chat.Config{Engine: s.eng, Metrics: s.metrics, Logger: s.log, DebugExtension: cfg.DebugExtension,
		MaxBodyBytes: cfg.MaxBodyBytes, RetryAfter: cfg.RetryAfter, Fallback: s.publishPosture()})
	s.responses = responses.New(responses.Config{Chat: s.chat, Store: responses.NewStore(cfg.Responses),
		Scope: scope, Detach: s.detach, Logger: s.log})
	s.setupIdempotency()
	s.router = httpserve.NewRouter(s.notFound, s.methodNotAllowed)
	for pattern, rh := range map[string]routeHandler{
		"POST /v1/chat/completions":          {"chat", true, s.handleChat},
		"GET /v1/models":                     {"models", true, s.handleModels},
		"POST /v1/responses":                 {"responses", true, s.handleResponses},
		"GET /v1/responses/{id}":             {"responses.retrieve", true, s.onResponse(s.responses.Retrieve)},
		"DELETE /v1/responses/{id}":          {"responses.delete", true, s.onResponse(s.responses.Delete)},
		"POST /v1/responses/{id}/cancel":     {"responses.cancel", true, s.onResponse(s.responses.Cancel)},
		"GET /v1/responses/{id}/input_items": {"responses.input_items", true, s.onResponse(s.responses.InputItems)},
		"GET /v1/models/":                    {"models", true, s.handleModel},
		"GET /healthz":                       {"healthz", false, s.handleHealthz},
		"GET /readyz":                        {"readyz", false, s.handleReadyz},
		"GET /metrics":                       {"metrics", true, s.handleMetrics},
	} {
		s.router.Handle(pattern, s.route(rh))
	}
	// trip2g serves its sealing form on its main listener behind its authentication; so does codellm.
	seal := sealform.Handler(func(w http.ResponseWriter, r *http.Request, e *openai.Error) { s.fail(w, reqLogOf(r), e) })
	for _, m := range []string{"GET ", "POST "} {
		s.router.Handle(m+cfg.SealPath, s.route(routeHandler{"seal", true, func(w http.ResponseWriter, r *http.Request, _ *reqLog) {
			seal.ServeHTTP(w, r)
		}}))
	}
	s.guarded = httpserve.Guard(s.guard, s.probeExempt, s.refuse, s.router)
	s.handler = httpserve.WithRequestID(http.HandlerFunc(s.serveHTTP))
	if cfg.InsecurePublic && !listen.IsLoopback(cfg.Listen) && cfg.APIKey == "" && cfg.ClientCA == "" {
		s.log.Warn("serving unauthenticated on a public address (--insecure-public): anyone who can reach it can run code",
			"listen", cfg.Listen)
	}
	return s, nil
}

// Engine returns the server's engine (shared with the debugger and the runner API).
func (s *Server) Engine() *engine.Engine { return s.eng }

// Metrics returns the server's metrics.
func (s *Server) Metrics() *metrics.Service { return s.metrics }

// Handler returns the main listener's handler.
func (s *Server) Handler() http.Handler { return s.handler }

// Route registers an extra handler on the main listener behind the same authentication (used by the
// runner API). pattern is an exact path or a prefix ending in "/". Register before serving. A body that
// is not JSON is refused in Piston's envelope ({"message"}), the one the runner API answers everywhere.
func (s *Server) Route(method, pattern, name string, h http.HandlerFunc) {
	s.router.Handle(method+" "+pattern, s.routeWith(routeHandler{name: name, auth: true,
		h: func(w http.ResponseWriter, r *http.Request, rl *reqLog) { h(w, r) }}, s.refusePiston))
}

// refusePiston answers a refused request body as Piston does: 415 {"message"}.
func (s *Server) refusePiston(w http.ResponseWriter, r *http.Request, ref *httpguard.Refusal) {
	reqLogOf(r).Code = ref.Code
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(ref.Status)
	json.NewEncoder(w).Encode(map[string]string{"message": "requests must be of type application/json: " + ref.Message})
}

// route is one route's handler on the router: it names the request for the log and the metrics, then
// checks the content type and the credential, in that order, and runs rh (made idempotent).
func (s *Server) route(rh routeHandler) http.Handler { return s.routeWith(rh, s.refuse) }

// routeWith is route with the content type's refusal written by refuse.
func (s *Server) routeWith(rh routeHandler, refuse httpserve.Refuse) http.Handler {
	h := s.idempotent(rh.name, rh.h)
	var inner http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h(w, r, reqLogOf(r)) })
	if rh.auth {
		inner = httpserve.Auth(s.authCheck(), s.unauthorized, inner)
	}
	inner = s.inFlight(rh.name, inner)
	inner = httpserve.JSONBodies(refuse, inner)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reqLogOf(r).route = rh.name
		inner.ServeHTTP(w, r)
	})
}

type reqLogKey struct{}

// reqLogOf is the request's log record (serveHTTP puts it in the context before routing).
func reqLogOf(r *http.Request) *reqLog { return r.Context().Value(reqLogKey{}).(*reqLog) }

func (s *Server) notFound(w http.ResponseWriter, r *http.Request) {
	s.fail(w, reqLogOf(r), openai.NewError(http.StatusNotFound, "not_found", "no route for %s %s", r.Method, r.URL.Path))
}

func (s *Server) methodNotAllowed(w http.ResponseWriter, r *http.Request, allow []string) {
	e := openai.NewError(http.StatusMethodNotAllowed, "method_not_allowed", "method %s is not allowed on %s (allowed: %s)",
		r.Method, r.URL.Path, strings.Join(allow, ", "))
	e.Header = http.Header{"Allow": []string{strings.Join(allow, ", ")}}
	s.fail(w, reqLogOf(r), e)
}

// unauthorized refuses a request without the bearer key (mTLS, if configured, was already enforced by
// the TLS handshake; without a key every request is let through).
func (s *Server) unauthorized(w http.ResponseWriter, r *http.Request) {
	e := openai.NewError(http.StatusUnauthorized, "invalid_api_key", "missing or invalid API key (send Authorization: Bearer <key>)")
	e.Header = http.Header{"Www-Authenticate": []string{"Bearer"}}
	s.fail(w, reqLogOf(r), e)
}

// reqLog collects what the request log line and the metrics report.
type reqLog struct {
	requestID string // the X-Request-Id of the response
	route     string
	status    int
	chat.Facts
}

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	sw := &httpserve.StatusWriter{ResponseWriter: w}
	rl := &reqLog{route: "unknown", requestID: httpserve.RequestIDOf(r)}
	defer func() {
		if sw.Status == 0 {
			sw.Status = 499 // the handler wrote nothing: the client went away
		}
		rl.status = sw.Status
		s.metrics.HTTPRequests.WithLabelValues(rl.route, fmt.Sprint(rl.status), rl.Code).Inc()
		if ep := trip2gEndpoint(rl.route, r.Method); ep != "" {
			s.metrics.Trip2g.Request(ep, rl.status, time.Since(start))
		}
		s.logRequest(r, rl, time.Since(start))
	}()
	s.guarded.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), reqLogKey{}, rl)))
}

// refuse answers a request httpguard refused (Host, Origin, content type).
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, ref *httpguard.Refusal) {
	s.fail(w, reqLogOf(r), openai.NewError(ref.Status, ref.Code, "%s", ref.Message))
}

// probeExempt lets health and readiness probes of a public listener through the Host rule: orchestrators
// probe by pod IP, and the probes are unauthenticated anyway. A loopback listener exempts nothing.
func (s *Server) probeExempt(r *http.Request) bool {
	if listen.IsLoopback(s.cfg.Listen) || r.Header.Get("Origin") != "" {
		return false
	}
	return r.URL.Path == "/healthz" || r.URL.Path == "/readyz"
}

func (s *Server) fail(w http.ResponseWriter, rl *reqLog, e *openai.Error) {
	rl.Code = e.Code
	if e.Status == 499 {
		return // nobody to answer
	}
	openai.WriteError(w, e)
}

func (s *Server) logRequest(r *http.Request, rl *reqLog, d time.Duration) {
	attrs := []any{"method", r.Method, "path", r.URL.Path, "route", rl.route, "status", rl.status,
		"duration_ms", d.Milliseconds(), "request_id", rl.requestID}
	if rl.ID != "" {
		attrs = append(attrs, "id", rl.ID)
	}
	if rl.Code != "" {
		attrs = append(attrs, "code", rl.Code)
	}
	if rl.route == "chat" || rl.route == "responses" {
		attrs = append(attrs, "model", rl.Model, "blocks", rl.Blocks, "programs", strings.Join(rl.Programs, ","),
			"exits", strings.Join(rl.Exits, ","), "queue_ms", rl.Queue.Milliseconds(), "run_ms", rl.Run.Milliseconds())
	}
	level := slog.LevelInfo
	if rl.status >= 500 {
		level = slog.LevelError
	}
	s.log.Log(context.Background(), level, "request", attrs...)
}

func (s *Server) handleHealthz(w http.ResponseWriter, r *http.Request, rl *reqLog) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, "ok")
}

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request, rl *reqLog) {
	w.Header().Set("Content-Type", "application/json")
	w.Write(openai.Models())
}

// handleModel serves GET /v1/models/{id} (the SDKs' models.retrieve).
func (s *Server) handleModel(w http.ResponseWriter, r *http.Request, rl *reqLog) {
	body, e := openai.Model(strings.TrimPrefix(r.URL.Path, "/v1/models/"))
	if e != nil {
		s.fail(w, rl, e)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(body)
}

func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request, rl *reqLog) {
	s.metrics.Handler().ServeHTTP(w, r)
}

// Readiness is the /readyz body.
type Readiness struct {
	Ready    bool            `json:"ready"`
	Sandbox  string          `json:"sandbox"`
	Programs []string        `json:"programs"`
	Reason   string          `json:"reason"`
	Network  bool            `json:"network"`
	Draining bool            `json:"draining,omitempty"`
	Report   *sandbox.Report `json:"mechanisms,omitempty"`
}

// Readiness reports the current readiness.
func (s *Server) Readiness() Readiness {
	c := s.check.Load()
	rd := Readiness{Ready: c.done && c.ok, Reason: c.reason, Network: s.cfg.Network, Programs: []string{}}
	if s.programs != nil {
		rd.Programs = s.programs.Names()
	}
	if s.sb != nil {
		rd.Sandbox = string(s.sb.Mode())
		rep := s.sb.Report()
		rd.Report = &rep
	}
	if s.draining.Load() {
		rd.Ready, rd.Draining, rd.Reason = false, true, "shutting down"
	}
	return rd
}

func (s *Server) handleReadyz(w http.ResponseWriter, r *http.Request, rl *reqLog) {
	rd := s.Readiness()
	status := http.StatusOK
	if !rd.Ready {
		status = http.StatusServiceUnavailable
	}
	openai.WriteJSON(w, status, rd)
}

func (s *Server) sandboxReady() (bool, string) {
	c := s.check.Load()
	if !c.done {
		// Before the first self-check finishes we do not know yet; the request path runs it on demand.
		return true, ""
	}
	return c.ok, c.reason
}

// SelfCheck runs an empty file of every enabled interpreter under the configured sandbox and records the
// result for /readyz and for native-mode refusals (§1.3). A failure never stops the process.
func (s *Server) SelfCheck(ctx context.Context) {
	reason := s.eng.SelfCheck(ctx, s.log)
	s.check.Store(&selfCheck{done: true, ok: reason == "", reason: reason})
}

// TLSConfig builds the TLS configuration (nil without --tls-cert).
func (s *Server) TLSConfig() (*tls.Config, error) {
	if s.cfg.TLSCert == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(s.cfg.TLSCert, s.cfg.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if s.cfg.ClientCA != "" {
		pem, err := os.ReadFile(s.cfg.ClientCA)
		if err != nil {
			return nil, fmt.Errorf("--client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--client-ca %s: no PEM certificate found", s.cfg.ClientCA)
		}
		tc.ClientCAs = pool
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return tc, nil
}

// Serve serves on ln until ctx is cancelled. Shutdown: stop accepting, /readyz 503, new chat requests 503
// shutting_down; in-flight runs get the run timeout plus the kill grace, then their contexts are cancelled
// (which kills their processes and removes their workdirs) and Serve returns once every handler is done.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	tc, err := s.TLSConfig()
	if err != nil {
		ln.Close()
		return err
	}
	// Background responses run on the serving context: when Serve's drain ends it is cancelled, and they
	// are waited for, so that nothing of theirs outlives Serve.
	defer s.responses.Wait()
	return httpserve.Serve(ctx, ln, s.handler, httpserve.Options{
		Limits: s.cfg.Limits, Log: s.log, TLS: tc,
		Started: func(runs context.Context) {
			s.baseCtx.Store(runs)
			go s.SelfCheck(runs)
		},
		Draining: func() {
			s.draining.Store(true)
			s.log.Info("shutting down: draining in-flight runs")
		},
		// Deadline passed: kill what still runs, then wait for the handlers to notice.
		Grace:       s.eng.Config().Timeout + s.cfg.KillGrace,
		AfterCancel: s.cfg.KillGrace + 5*time.Second,
	})
}

// handleChat implements §2.1's processing order.
func (s *Server) handleChat(w http.ResponseWriter, r *http.Request, rl *reqLog) {
	s.converse(w, r, rl, openai.DecodeChatRequest)
}

// converse runs a chat completion or a Responses request through the chat core (decode maps either onto
// a ChatRequest); a draining server refuses new runs.
func (s *Server) converse(w http.ResponseWriter, r *http.Request, rl *reqLog, decode chat.Decoder) {
	rl.ID = openai.NewID()
	if s.draining.Load() {
		s.fail(w, rl, apiError(errShuttingDown, 0))
		return
	}
	s.chat.Converse(w, r, &rl.Facts, decode)
}

// registerSerial exports the sandbox's serial resources (codellm_sandbox_serial_*), when there is a sandbox.
func registerSerial(m *metrics.Service, sb *sandbox.Sandbox) {
	if sb == nil {
		return
	}
	m.RegisterSerial(func() metrics.Serial {
		st := sb.SerialStats()
		return metrics.Serial{Spawners: st.Spawners, SpawnerRequests: st.SpawnerRequests, SpawnerHeld: st.SpawnerHeld,
			SpawnerBusy: st.SpawnerBusy, SpawnerWait: st.SpawnerWait, GroupsMade: st.GroupsMade, GroupMake: st.GroupMake,
			GroupsRemoved: st.GroupsRemoved, GroupRemove: st.GroupRemove}
	})
}
