package worker

import (
	"strings"
	"testing"
)

// The runtime command route's reply is validated as §9.8 states it; anything else is refused (and the
// caller removes the container), never passed on.
func TestParseCommandReply(t *testing.T) {
	ok := []struct{ body, want string }{
		{`{"exitCode":0,"stdout":"a","stderr":"b","truncated":false,"timedOut":false}`, "0 a b"},
		{`{"exitCode":null,"signal":"SIGKILL","stdout":"","stderr":"","truncated":true,"timedOut":false}`, "null SIGKILL"},
		{`{"exitCode":null,"stdout":"","stderr":"","truncated":false,"timedOut":true}`, "null timedOut"},
	}
	for _, c := range ok {
		r, err := parseCommandReply([]byte(c.body), 16)
		if err != nil {
			t.Errorf("%s: %v", c.body, err)
			continue
		}
		got := "null"
		if r.ExitCode != nil {
			got = "0 " + r.Stdout + " " + r.Stderr
		} else if r.Signal != "" {
			got += " " + r.Signal
		} else if r.TimedOut {
			got += " timedOut"
		}
		if got != c.want {
			t.Errorf("%s: %q, want %q", c.body, got, c.want)
		}
	}
	for _, c := range []struct{ body, why string }{
		{`{"exitCode":0,"stdout":"","stderr":"","truncated":false,"timedOut":false,"extra":1}`, "unknown field"},
		{`{"exitCode":0,"stdout":"","stderr":"","truncated":false}`, "required"},
		{`{"stdout":"","stderr":"","truncated":false,"timedOut":false}`, "required"},
		{`{"exitCode":256,"stdout":"","stderr":"","truncated":false,"timedOut":false}`, "0..255"},
		{`{"exitCode":1.5,"stdout":"","stderr":"","truncated":false,"timedOut":false}`, "0..255"},
		{`{"exitCode":0,"stdout":"","stderr":"","truncated":false,"timedOut":true}`, "exactly when"},
		{`{"exitCode":null,"stdout":"","stderr":"","truncated":false,"timedOut":false}`, "exactly when"},
		{`{"exitCode":null,"signal":"","stdout":"","stderr":"","truncated":false,"timedOut":true}`, "signal is empty"},
		{`{"exitCode":0,"stdout":"0123456789","stderr":"0123456789","truncated":false,"timedOut":false}`, "maxOutputBytes"},
		{`{"exitCode":"0","stdout":"","stderr":"","truncated":false,"timedOut":false}`, "0..255"},
		{`[]`, "cannot unmarshal"},
	} {
		if _, err := parseCommandReply([]byte(c.body), 16); err == nil || !strings.Contains(err.Error(), c.why) {
			t.Errorf("%s: %v, want an error about %q", c.body, err, c.why)
		}
	}
}

// The token is the HMAC of the canonical root under the worker's key: another key or root gives another.
func TestWorkspaceCommandToken(t *testing.T) {
	a := WorkspaceCommandToken("key", "/w")
	if len(a) != 43 || strings.ContainsAny(a, "+/=") || a == WorkspaceCommandToken("key2", "/w") || a == WorkspaceCommandToken("key", "/w2") {
		t.Fatalf("token %q", a)
	}
	if s := WorkspaceCommandSession("w", "primary"); len(s) != len("workspace-")+40 || s == WorkspaceCommandSession("w", "other") {
		t.Fatalf("session %q", s)
	}
}
