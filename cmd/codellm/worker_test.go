package main

import (
	"bytes"
	"strings"
	"testing"
)

// Worker settings: flag, then CODELLM_*, then LIBRECHAT_CODE_*, then the default; differing spellings
// warn. Positional arguments may come before or after flags.
func TestWorkerFlagPrecedence(t *testing.T) {
	parseWith := func(args ...string) (*workerFlags, []string, string) {
		var stderr bytes.Buffer
		fs := newFlagSet("worker run", "worker run", &stderr)
		var f workerFlags
		f.register(fs, true)
		pos, code := parseInterspersed(fs, args, &stderr)
		if code >= 0 {
			t.Fatalf("parse: %d %s", code, stderr.String())
		}
		return &f, pos, stderr.String()
	}
	t.Setenv("LIBRECHAT_CODE_WORKER_ID", "from-alias")
	t.Setenv("LIBRECHAT_CODE_IDENTITY_FILE", "/alias/identity.json")
	t.Setenv("LIBRECHAT_CODE_ALLOW_WORKSPACE_WRITES", "true")
	f, _, warn := parseWith()
	if f.workerID != "from-alias" || f.identity != "/alias/identity.json" || !f.writes || warn != "" {
		t.Fatalf("alias only: %+v %q", f, warn)
	}
	t.Setenv("CODELLM_WORKER_ID", "from-codellm")
	f, _, warn = parseWith()
	if f.workerID != "from-codellm" || !strings.Contains(warn, "CODELLM_WORKER_ID and LIBRECHAT_CODE_WORKER_ID differ") {
		t.Fatalf("both set: %q %q", f.workerID, warn)
	}
	f, pos, _ := parseWith("sess-1", "--worker-id", "from-flag", "extra")
	if f.workerID != "from-flag" || len(pos) != 2 || pos[0] != "sess-1" || pos[1] != "extra" {
		t.Fatalf("flag: %q %q", f.workerID, pos)
	}
	// A pairing code may start with a dash (base64url): it is still a positional argument.
	f, pos, _ = parseWith("http://hub/v1", "-bHUOsthj9x", "--worker-id", "w1")
	if f.workerID != "w1" || len(pos) != 2 || pos[1] != "-bHUOsthj9x" {
		t.Fatalf("dash-leading code: %q %q", f.workerID, pos)
	}
	if code := cmdWorker([]string{"reset-workspace"}, &bytes.Buffer{}, &bytes.Buffer{}); code != 2 {
		t.Fatalf("reset-workspace without a session: exit %d", code)
	}
	if code := cmdWorker([]string{"nope"}, &bytes.Buffer{}, &bytes.Buffer{}); code != 2 {
		t.Fatalf("unknown subcommand: exit %d", code)
	}
}
