// Package metrics owns codellm's Prometheus metrics: their names, labels and help texts live here and
// nowhere else, so that the documented list (docs/operator.md) and the exposition cannot drift apart.
// Every metric is prefixed codellm_. Each server builds its own registry (no global state), which keeps
// tests independent and lets one process serve several listeners.
package metrics

import (
	"net/http"
	"regexp"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Service holds the metrics of the execution service (chat endpoint, runner API, debugger).
type Service struct {
	Registry *prometheus.Registry

	HTTPRequests     *prometheus.CounterVec   // route, status, code
	RunDuration      *prometheus.HistogramVec // outcome
	SandboxSetup     prometheus.Histogram
	RunBlocks        prometheus.Histogram
	Kills            *prometheus.CounterVec // reason
	QueueWait        prometheus.Histogram
	RunsInFlight     prometheus.GaugeFunc
	ReexecutionGuard prometheus.Counter
	Egress           *Egress
	Idempotency      *prometheus.CounterVec // event
	Trip2g           *Trip2g                // trip2g's names for the same events (trip2g.go)
}

// Egress counts the egress proxy's decisions and traffic; it satisfies
// package egress's Metrics interface.
type Egress struct {
	Connections *prometheus.CounterVec // decision, reason
	Traffic     *prometheus.CounterVec // direction
}

// EgressReasons are the values of codellm_egress_connections_total{reason}
// (decision "allowed" has reason "allowed"; every other reason is "refused").
var EgressReasons = []string{"allowed", "not_allowed", "raw_ip", "private_address", "invalid_name", "resolve_failed",
	"dial_failed", "conn_limit", "open_limit", "byte_limit", "bad_request", "bad_response"}

// Connection counts one decision.
func (e *Egress) Connection(decision, reason string) {
	e.Connections.WithLabelValues(decision, reason).Inc()
}

// Bytes counts relayed bytes ("sent" to destinations, "received" from them).
func (e *Egress) Bytes(direction string, n int64) {
	e.Traffic.WithLabelValues(direction).Add(float64(n))
}

// IdempotencyEvents are the values of codellm_idempotency_events_total{event} (idempotency.Events).
var IdempotencyEvents = []string{"recorded", "replayed", "attached", "mismatch", "released", "evicted", "too_large", "lost"}

// KillReasons are the values of codellm_kills_total{reason}.
var KillReasons = []string{"timeout", "cancelled", "output_limit", "memory", "pids", "cpu"}

// mutexWait adds go_sync_mutex_wait_total_seconds_total to the service's Go collector: the time its
// goroutines waited for locks, server-wide ones included (bench's scaling row reads it per request).
var mutexWait = collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/sync/mutex/wait/total:seconds$`)}

// NewService registers the service metrics on a fresh registry. inFlight reports the runs holding a slot.
func NewService(inFlight func() float64) *Service {
	r := prometheus.NewRegistry()
	m := &Service{
		Registry: r,
		HTTPRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "codellm_http_requests_total",
			Help: "HTTP requests by route, status and error code (code is empty on success).",
		}, []string{"route", "status", "code"}),
		RunDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "codellm_run_duration_seconds",
			Help:    "Wall time of runs from slot acquisition to the last process reaped, by outcome.",
			Buckets: []float64{.002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}, []string{"outcome"}),
		SandboxSetup: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "codellm_sandbox_setup_seconds",
			Help: "Time from starting a block's sandbox until its program was exec'd.",
			// From sub-millisecond (bare metal, cgroup v2) to the 50–500 ms measured on a small VM with cgroup
			// v1, so that both ends keep resolution.
			Buckets: []float64{.0005, .001, .002, .005, .01, .025, .05, .1, .2, .3, .5, 1, 2.5},
		}),
		RunBlocks: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "codellm_run_blocks",
			Help:    "Number of blocks per run.",
			Buckets: []float64{1, 2, 3, 4, 6, 8, 16, 32, 64},
		}),
		Kills: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "codellm_kills_total",
			Help: "Blocks killed by codellm, by reason (timeout, cancelled, output_limit, memory, pids, cpu).",
		}, []string{"reason"}),
		QueueWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "codellm_queue_wait_seconds",
			Help:    "Time a run waited for an execution slot.",
			Buckets: []float64{0, .001, .01, .1, .5, 1, 5, 10, 30},
		}),
		RunsInFlight: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "codellm_runs_in_flight",
			Help: "Runs holding an execution slot now.",
		}, inFlight),
		ReexecutionGuard: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "codellm_reexecution_guard_total",
			Help: "Chat requests answered by the re-execution guard without running anything.",
		}),
		Idempotency: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "codellm_idempotency_events_total",
			Help: "Idempotency-Key and client-retry handling by event (recorded, replayed, attached, mismatch, released, evicted, too_large).",
		}, []string{"event"}),
	}
	m.Egress = &Egress{
		Connections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "codellm_egress_connections_total",
			Help: "Connections asked of the egress proxy, by decision (allowed, refused) and reason.",
		}, []string{"decision", "reason"}),
		Traffic: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "codellm_egress_bytes_total",
			Help: "Bytes the egress proxy relayed, by direction (sent, received).",
		}, []string{"direction"}),
	}
	r.MustRegister(m.HTTPRequests, m.RunDuration, m.SandboxSetup, m.RunBlocks, m.Kills, m.QueueWait,
		m.RunsInFlight, m.ReexecutionGuard, m.Egress.Connections, m.Egress.Traffic, m.Idempotency,
		collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(mutexWait)), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.Trip2g = registerTrip2g(r)
	// Pre-create the kill reasons so that a scrape shows every documented series from the start.
	for _, reason := range KillReasons {
		m.Kills.WithLabelValues(reason)
	}
	for _, e := range IdempotencyEvents {
		m.Idempotency.WithLabelValues(e)
	}
	for _, reason := range EgressReasons {
		d := "refused"
		if reason == "allowed" {
			d = "allowed"
		}
		m.Egress.Connections.WithLabelValues(d, reason)
	}
	m.Egress.Traffic.WithLabelValues("sent")
	m.Egress.Traffic.WithLabelValues("received")
	return m
}

// Handler serves the Prometheus text exposition of the registry.
func (m *Service) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{})
}

// Hub holds the metrics of `codellm hub`, the coordinator that hands client requests to paired workers.
type Hub struct {
	Registry *prometheus.Registry

	WorkersOnline prometheus.GaugeFunc
	Assignments   *prometheus.CounterVec   // state
	LeaseWait     *prometheus.HistogramVec // result
	StoreErrors   *prometheus.CounterVec   // operation
	Idempotency   *prometheus.CounterVec   // event (IdempotencyEvents)
}

// AssignmentStates are the values of codellm_hub_assignments_total{state}: every assignment is counted
// once as "enqueued" and once more with how it ended.
var AssignmentStates = []string{"enqueued", "fulfilled", "rejected", "expired", "withdrawn", "worker_offline", "failed"}

// StoreOperations are the values of codellm_hub_store_errors_total{operation}: the hub's store
// operations (store.Protocol's) and its epoch probe.
var StoreOperations = []string{"create_pairing", "redeem_pairing", "revoke", "credential", "refresh_credential",
	"use_nonce", "register", "ready", "worker", "workers", "enqueue", "lease", "ack", "cancelled", "cancel",
	"settle", "settlement", "complete", "withdraw", "reset_workspace", "quarantine", "epoch"}

// LeaseResults are the values of codellm_hub_lease_wait_seconds{result}.
var LeaseResults = []string{"assignment", "empty"}

// NewHub registers the hub metrics on a fresh registry. online counts the workers the store reports
// online; it is called at scrape time, so it must be cheap and bounded (the hub gives it a timeout).
func NewHub(online func() float64) *Hub {
	r := prometheus.NewRegistry()
	m := &Hub{
		Registry: r,
		WorkersOnline: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "codellm_hub_workers_online",
			Help: "Workers whose registration is live in the hub's store (-1 when the store could not be read).",
		}, online),
		Assignments: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "codellm_hub_assignments_total",
			Help: "Assignments by state: enqueued when handed to a worker, then fulfilled, rejected, expired, withdrawn, worker_offline or failed.",
		}, []string{"state"}),
		LeaseWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "codellm_hub_lease_wait_seconds",
			Help:    "How long a worker's lease long poll waited, by result (assignment or empty).",
			Buckets: []float64{.001, .01, .05, .1, .5, 1, 2.5, 5, 10, 20, 30},
		}, []string{"result"}),
		StoreErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "codellm_hub_store_errors_total",
			Help: "Store operations that failed because the store was unreachable or could not write, by operation.",
		}, []string{"operation"}),
		Idempotency: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "codellm_hub_idempotency_events_total",
			Help: "Idempotency-Key and client-retry handling on /v1/exec and the chat route, by event.",
		}, []string{"event"}),
	}
	r.MustRegister(m.WorkersOnline, m.Assignments, m.LeaseWait, m.StoreErrors, m.Idempotency,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, s := range AssignmentStates {
		m.Assignments.WithLabelValues(s)
	}
	for _, res := range LeaseResults {
		m.LeaseWait.WithLabelValues(res)
	}
	for _, op := range StoreOperations {
		m.StoreErrors.WithLabelValues(op)
	}
	for _, e := range IdempotencyEvents {
		m.Idempotency.WithLabelValues(e)
	}
	return m
}

// Worker holds the metrics of `codellm worker`, served only on its opt-in loopback --metrics-listen (the
// worker otherwise has no inbound port, like the reference worker). The egress counters are the service's,
// with a scope label: "runs" for code the runner executes (--network-allow), "commands" for workspace
// commands (--command-allowed-domains). The names carry the codellm_worker_ prefix, as the hub's carry
// codellm_hub_, so that each process's documented table stays its own.
type Worker struct {
	Registry *prometheus.Registry
	Runs     *Egress
	Commands *Egress
}

// EgressScopes are the values of the worker's codellm_worker_egress_*{scope}.
var EgressScopes = []string{"runs", "commands"}

// NewWorker registers the worker metrics on a fresh registry, every documented series pre-created.
func NewWorker() *Worker {
	r := prometheus.NewRegistry()
	conns := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "codellm_worker_egress_connections_total",
		Help: "Connections asked of the worker's egress proxies, by scope (runs, commands), decision (allowed, refused) and reason.",
	}, []string{"scope", "decision", "reason"})
	traffic := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "codellm_worker_egress_bytes_total",
		Help: "Bytes the worker's egress proxies relayed, by scope (runs, commands) and direction (sent, received).",
	}, []string{"scope", "direction"})
	r.MustRegister(conns, traffic, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	scoped := func(scope string) *Egress {
		l := prometheus.Labels{"scope": scope}
		e := &Egress{Connections: conns.MustCurryWith(l), Traffic: traffic.MustCurryWith(l)}
		for _, reason := range EgressReasons {
			d := "refused"
			if reason == "allowed" {
				d = "allowed"
			}
			e.Connections.WithLabelValues(d, reason)
		}
		e.Traffic.WithLabelValues("sent")
		e.Traffic.WithLabelValues("received")
		return e
	}
	return &Worker{Registry: r, Runs: scoped("runs"), Commands: scoped("commands")}
}

// Handler serves the Prometheus text exposition of the worker registry.
func (m *Worker) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{})
}

// Handler serves the Prometheus text exposition of the hub registry.
func (m *Hub) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{})
}

// Serial are the counters of what a block's start and end pass through one at a time (package
// sandbox's SerialStats), exported as codellm_sandbox_serial_*: per block, a resource busy for d
// bounds the host to 1/d blocks a second whatever its cores.
type Serial struct {
	Spawners                  int
	SpawnerRequests           int64
	SpawnerHeld, SpawnerBusy  time.Duration
	SpawnerWait               time.Duration
	GroupsMade, GroupsRemoved int64
	GroupMake, GroupRemove    time.Duration
}

// SerialResources are the values of codellm_sandbox_serial_seconds_total{resource}.
var SerialResources = []string{"spawner_held", "spawner_busy", "spawner_wait", "cgroup_make", "cgroup_remove"}

// RegisterSerial exports read's counters, read at scrape time.
func (m *Service) RegisterSerial(read func() Serial) {
	m.Registry.MustRegister(serialCollector{read})
}

type serialCollector struct{ read func() Serial }

var (
	serialSeconds = prometheus.NewDesc("codellm_sandbox_serial_seconds_total",
		"Time spent in what blocks pass through one at a time, by resource: spawner_held (blocks holding a spawner for its round trip), spawner_busy (the spawners' own loops), spawner_wait (blocks waiting for a free spawner), cgroup_make and cgroup_remove (run and block cgroups).",
		[]string{"resource"}, nil)
	serialOps = prometheus.NewDesc("codellm_sandbox_serial_operations_total",
		"Operations counted in codellm_sandbox_serial_seconds_total, by resource: spawner (helpers asked of spawners), cgroup_make, cgroup_remove.",
		[]string{"resource"}, nil)
	spawners = prometheus.NewDesc("codellm_sandbox_spawners", "Spawner processes running (at most one per four CPUs).", nil, nil)
)

func (c serialCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- serialSeconds
	ch <- serialOps
	ch <- spawners
}

func (c serialCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.read()
	for i, d := range []time.Duration{s.SpawnerHeld, s.SpawnerBusy, s.SpawnerWait, s.GroupMake, s.GroupRemove} {
		ch <- prometheus.MustNewConstMetric(serialSeconds, prometheus.CounterValue, d.Seconds(), SerialResources[i])
	}
	for _, o := range []struct {
		name string
		n    int64
	}{{"spawner", s.SpawnerRequests}, {"cgroup_make", s.GroupsMade}, {"cgroup_remove", s.GroupsRemoved}} {
		ch <- prometheus.MustNewConstMetric(serialOps, prometheus.CounterValue, float64(o.n), o.name)
	}
	ch <- prometheus.MustNewConstMetric(spawners, prometheus.GaugeValue, float64(s.Spawners))
}
