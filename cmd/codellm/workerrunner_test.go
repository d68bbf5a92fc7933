package main

import (
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/codellm/codellm/internal/engine"
	"github.com/codellm/codellm/internal/runner"
	"github.com/codellm/codellm/internal/worker"
)

// The worker's embedded supervisor builds its runner from the same execution settings as serve: its
// workspaces go under --work-dir, not the system temp dir (they once ignored it), and its output cap is
// --max-output-bytes.
func TestWorkerRunnerHonoursExecSettings(t *testing.T) {
	requireNative(t)
	dir := newWorkDir(t)
	fs := newFlagSet("worker run", "worker run [flags]", io.Discard)
	var f workerFlags
	f.register(fs, true)
	var ef execFlags
	ef.register(fs)
	if _, code := parseInterspersed(fs, []string{"--work-dir", dir, "--max-output-bytes", "2MiB"}, io.Discard); code >= 0 {
		t.Fatalf("parse: exit %d", code)
	}
	if got := ef.runnerConfig(runner.Config{}, engine.Config{}, nil, nil).MaxOutputBytes; got != 2<<20 {
		t.Errorf("runner MaxOutputBytes %d, want %d", got, 2<<20)
	}
	var cfg worker.Config
	_, _, closeSup, err := f.embeddedSupervisor(&ef, &cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer closeSup()
	// Directly below it, or below the private scratch tmpfs codellm mounts there (package scratch).
	m, _ := filepath.Glob(filepath.Join(dir, "codellm-runner-*"))
	s, _ := filepath.Glob(filepath.Join(dir, "codellm-scratch-*", "codellm-runner-*"))
	if len(m)+len(s) != 1 {
		t.Fatalf("runner directories under --work-dir %s: %v %v, want one", dir, m, s)
	}
}
