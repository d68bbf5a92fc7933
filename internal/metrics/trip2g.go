package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Trip2g holds the metrics of trip2g's own codellm (its package codellmmetrics, up to trip2g PR #360) under
// their names, types, labels and buckets, served beside codellm's on the same registry, so that a trip2g
// operator's dashboards and alerts keep working when the binary is swapped (docs/fleet.md §6.7). They are
// fed from the same events as codellm's own; where codellm knows more than trip2g did, the label values
// trip2g lacks are documented in docs/operator.md §5.1.1. Like trip2g's, most series appear with their
// first event.
type Trip2g struct {
	Requests         *prometheus.CounterVec   // endpoint, status
	RequestDuration  *prometheus.HistogramVec // endpoint
	RequestsInFlight prometheus.Gauge
	Auth             *prometheus.CounterVec // lane, result
	ExecErrors       *prometheus.CounterVec // kind
	ExecReplays      prometheus.Counter
	Blocks           *prometheus.CounterVec   // program, outcome
	BlockExitCodes   *prometheus.CounterVec   // program, exit_code
	BlockDuration    *prometheus.HistogramVec // program
	BlockMaxRSS      *prometheus.HistogramVec // program
	BlockStdout      *prometheus.HistogramVec // program
	BlockTruncated   *prometheus.CounterVec   // program
	SandboxFallbacks *prometheus.CounterVec   // reason
	RequestBlocks    prometheus.Histogram
	Changes          *prometheus.CounterVec // kind
	ConfigInfo       *prometheus.GaugeVec   // sandbox_mode, sandbox_network, allowed_programs
}

// Trip2gExecErrorKinds are the values of codellm_exec_errors_total{kind}: trip2g's kinds that codellm's
// failures map onto, then codellm's own codes for failures trip2g had no kind for.
var Trip2gExecErrorKinds = []string{"no_blocks", "unknown_fence", "disallowed_program", "sandbox_refused", "timeout",
	"nonzero_exit", "parse_error", "internal", "output_limit", "unclosed_fence", "missing_tool", "unseal_error"}

// Trip2gChangeKinds are the values of codellm_changes_total{kind}.
var Trip2gChangeKinds = []string{"write", "patch"}

func newTrip2g() *Trip2g {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	histogram := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
	}
	return &Trip2g{
		Requests: counter("codellm_requests_total", "trip2g's name: requests by endpoint (chat_completions, responses, seal_form, seal) and HTTP status.",
			"endpoint", "status"),
		RequestDuration: histogram("codellm_request_duration_seconds", "trip2g's name: request duration by endpoint.",
			prometheus.DefBuckets, "endpoint"),
		RequestsInFlight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "codellm_requests_in_flight",
			Help: "trip2g's name: requests of the endpoints above being served now."}),
		Auth: counter("codellm_auth_total", "trip2g's name: authentication decisions by lane (apikey, client_cert) and result (allowed, denied).",
			"lane", "result"),
		ExecErrors: counter("codellm_exec_errors_total", "trip2g's name: failed code runs by kind.", "kind"),
		ExecReplays: prometheus.NewCounter(prometheus.CounterOpts{Name: "codellm_exec_replays_total",
			Help: "trip2g's name: requests answered from the Idempotency-Key record (or by waiting for the first attempt) instead of running again."}),
		Blocks: counter("codellm_blocks_total", "trip2g's name: blocks by program and outcome (ok, nonzero_exit, timeout, start_failed, excused, cancelled, output_limit).",
			"program", "outcome"),
		BlockExitCodes: counter("codellm_block_exit_codes_total", "trip2g's name: blocks by program and exit code (-1: none, the block died of a signal or never ran).",
			"program", "exit_code"),
		BlockDuration: histogram("codellm_block_duration_seconds", "trip2g's name: wall time of one block.",
			[]float64{0.01, 0.05, 0.1, 0.5, 1, 5, 15, 30, 60, 300}, "program"),
		BlockMaxRSS: histogram("codellm_block_max_rss_bytes", "trip2g's name: peak resident memory of one block.",
			prometheus.ExponentialBuckets(1<<20, 4, 8), "program"),
		BlockStdout: histogram("codellm_block_stdout_bytes", "trip2g's name: captured stdout of a run's last block.",
			prometheus.ExponentialBuckets(256, 4, 8), "program"),
		BlockTruncated: counter("codellm_block_stdout_truncated_total", "trip2g's name: last blocks whose stdout passed the cap (the run failed with output_limit).",
			"program"),
		SandboxFallbacks: counter("codellm_sandbox_fallbacks_total", "trip2g's name: blocks run in besteffort mode without every mechanism, by the missing ones.",
			"reason"),
		RequestBlocks: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "codellm_request_blocks",
			Help: "trip2g's name: blocks run per request.", Buckets: []float64{1, 2, 3, 5, 8, 13, 21}}),
		Changes: counter("codellm_changes_total", "trip2g's name: changes answered as tool calls, by kind (write, patch).", "kind"),
		ConfigInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "codellm_config_info",
			Help: "trip2g's name: always 1; the labels are the execution posture of this process."}, []string{"sandbox_mode", "sandbox_network", "allowed_programs"}),
	}
}

// registerTrip2g registers the collectors on r, the kinds of the two counters whose values are fixed
// pre-created.
func registerTrip2g(r *prometheus.Registry) *Trip2g {
	m := newTrip2g()
	r.MustRegister(m.Requests, m.RequestDuration, m.RequestsInFlight, m.Auth, m.ExecErrors, m.ExecReplays,
		m.Blocks, m.BlockExitCodes, m.BlockDuration, m.BlockMaxRSS, m.BlockStdout, m.BlockTruncated, m.SandboxFallbacks,
		m.RequestBlocks, m.Changes, m.ConfigInfo)
	for _, k := range Trip2gExecErrorKinds {
		m.ExecErrors.WithLabelValues(k)
	}
	for _, k := range Trip2gChangeKinds {
		m.Changes.WithLabelValues(k)
	}
	return m
}

// Request records one request of an endpoint trip2g instrumented.
func (m *Trip2g) Request(endpoint string, status int, d time.Duration) {
	m.Requests.WithLabelValues(endpoint, strconv.Itoa(status)).Inc()
	m.RequestDuration.WithLabelValues(endpoint).Observe(d.Seconds())
}

// Block records one block that ran (or failed to start). exitCode is -1 when there is none; stdout is
// negative for a block whose stdout codellm did not capture (every block but the last streams it on).
func (m *Trip2g) Block(program, outcome string, exitCode int, wall time.Duration, maxRSS, stdout int64, truncated bool) {
	m.Blocks.WithLabelValues(program, outcome).Inc()
	m.BlockExitCodes.WithLabelValues(program, strconv.Itoa(exitCode)).Inc()
	m.BlockDuration.WithLabelValues(program).Observe(wall.Seconds())
	if maxRSS > 0 {
		m.BlockMaxRSS.WithLabelValues(program).Observe(float64(maxRSS))
	}
	if stdout >= 0 {
		m.BlockStdout.WithLabelValues(program).Observe(float64(stdout))
	}
	if truncated {
		m.BlockTruncated.WithLabelValues(program).Inc()
	}
}

// SetConfig publishes the execution posture (codellm_config_info).
func (m *Trip2g) SetConfig(sandboxMode string, network bool, programs string) {
	m.ConfigInfo.Reset()
	m.ConfigInfo.WithLabelValues(sandboxMode, strconv.FormatBool(network), programs).Set(1)
}
