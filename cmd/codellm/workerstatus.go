package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"github.com/codellm/codellm/internal/httpguard"
	"github.com/codellm/codellm/internal/httpserve"
	"github.com/codellm/codellm/internal/listen"
	"github.com/codellm/codellm/internal/metrics"
	"github.com/codellm/codellm/internal/sandbox"
	"github.com/codellm/codellm/internal/worker"
)

// The worker's opt-in status listener (--metrics-listen, loopback only, off by default). The reference
// worker exposes nothing: it only connects out, and so does codellm's unless the operator asks for this.
// Reporting through the hub would need a field the bridge protocol's strict registration schema does not
// have, so a reference hub would refuse it. GET /metrics is the worker registry (egress counters by scope);
// GET /readyz says whether the hub accepted the registration and the worker's last exchange with it went
// through (a worker that lost the hub turns unready until it is back), and lists each egress proxy's normalised
// allow-list and digest.

// workerReadiness is the worker's /readyz body.
type workerReadiness struct {
	Ready      bool                     `json:"ready"`
	WorkerID   string                   `json:"worker_id"`
	Supervisor string                   `json:"supervisor"`
	Egress     map[string]*egressStatus `json:"egress"`
}

// egressStatus is one scope's proxy: nil report = no proxy, nothing can leave.
type egressStatus struct {
	Enabled bool `json:"enabled"`
	*sandbox.EgressReport
}

func newEgressStatus(r *sandbox.EgressReport) *egressStatus {
	return &egressStatus{Enabled: r != nil, EgressReport: r}
}

// startWorkerStatus validates addr and serves the status listener until ctx ends; the returned func waits
// for it to stop. An empty addr serves nothing.
func startWorkerStatus(ctx context.Context, addr string, m *metrics.Worker, rd func() workerReadiness, log *slog.Logger) (func(), error) {
	if addr == "" {
		return func() {}, nil
	}
	if !listen.IsLoopback(addr) {
		return nil, fmt.Errorf("%w: --metrics-listen %q must be a loopback address (the listener has no authentication)", worker.ErrConfig, addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%w: --metrics-listen: %v", worker.ErrConfig, err)
	}
	guard := httpguard.ForListener(addr, nil, nil)
	rt := httpserve.NewRouter(func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) },
		func(w http.ResponseWriter, r *http.Request, allow []string) {
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		})
	rt.Handle("GET /metrics", m.Handler())
	rt.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		v := rd()
		w.Header().Set("Content-Type", "application/json")
		if !v.Ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(v)
	})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ref := guard.Check(r); ref != nil {
			http.Error(w, ref.Message, ref.Status)
			return
		}
		rt.ServeHTTP(w, r)
	})
	log.Info("worker status listening (loopback only, no authentication)", "metrics_listen", ln.Addr().String())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := httpserve.Serve(ctx, ln, h, httpserve.Options{Log: log, Grace: 1}); err != nil {
			log.Error("worker status listener stopped", "err", err)
		}
	}()
	return func() { <-done }, nil
}
