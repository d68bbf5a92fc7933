package hub

import (
	"encoding/json"
	"regexp"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/bridge"
)

// limitCall is one request of the limits golden file and the hub's answer: the status, the rate-limit
// headers and the body, with ids and the seconds left in a window replaced by placeholders.
type limitCall struct {
	Name    string            `json:"name"`
	Method  string            `json:"method"`
	Path    string            `json:"path"`
	Body    string            `json:"request,omitempty"`
	Status  int               `json:"status"`
	Headers map[string]string `json:"headers,omitempty"`
	Reply   string            `json:"reply"`
}

// goldenSecs is the seconds left in a rate-limit window (in Retry-After, RateLimit-Reset, the message
// and retry_after_seconds): they depend on how long the calls before took.
var goldenSecs = regexp.MustCompile(`(retry in |"retry_after_seconds":)[0-9]+( seconds?)?`)

// TestLimitsGolden pins issue 40 item 8's shapes to upstream's (code-interpreter's
// service/src/middleware/limits.ts and sandbox-egress.ts's normalizeProgrammaticTimeoutMs): /v1/exec's
// body timeout refusals, and the 429 of each limited route with Retry-After and the draft-6 RateLimit-*
// headers. A refused request still counts, as upstream's limiter runs before the route. Regenerate with `go test ./internal/hub -run TestLimitsGolden -update`.
func TestLimitsGolden(t *testing.T) {
	one := RateLimit{Max: 1, Window: time.Minute}
	h := newTestHub(t, func(c *Config) {
		c.RateLimits = RateLimits{Exec: RateLimit{Max: 4, Window: 30 * time.Second}, Upload: one, Download: one, Listing: one}
	})
	w := newWorker(t, h, "vm-golden")
	w.pair(h)
	w.mustRegister()
	stop := w.serve(func(a *bridge.Assignment) bridge.Settlement { return runnerReply(a, w.incarnation) })
	defer stop()
	norm := normalizer{}
	var got []limitCall
	record := func(name, method, path, body string, r reply) {
		hdr := map[string]string{}
		for _, k := range []string{"Retry-After", "RateLimit-Policy", "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"} {
			if v := r.header.Get(k); v != "" {
				hdr[k] = v
			}
		}
		if r.status == 429 {
			hdr["Retry-After"], hdr["RateLimit-Reset"] = "<s>", "<s>"
		} else if hdr["RateLimit-Reset"] != "" {
			hdr["RateLimit-Reset"] = "<s>"
		}
		reply := goldenSecs.ReplaceAllString(norm.apply(string(r.body)), "$1<s>$2")
		got = append(got, limitCall{Name: name, Method: method, Path: norm.apply(path), Body: body, Status: r.status, Headers: hdr, Reply: reply})
	}
	for _, c := range []struct{ name, body string }{
		{"exec: timeout as a string", `{"lang":"py","code":"print(1)","timeout":"2000"}`},
		{"exec: timeout 0", `{"lang":"py","code":"print(1)","timeout":0}`},
		{"exec: timeout 1500.5", `{"lang":"py","code":"print(1)","timeout":1500.5}`},
		{"exec: the window's last request", `{"lang":"py","code":"print(2)"}`},
		{"exec: rate limited", `{"lang":"py","code":"print(3)"}`},
	} {
		record(c.name, "POST", "/v1/exec", c.body, h.client(t, "/v1/exec", c.body, nil))
	}
	up := h.upload(t, apiKey, true, uploadPart{"file", "a.txt", "x"})
	var u uploadReply
	_ = json.Unmarshal(up.body, &u)
	record("upload: rate limited", "POST", "/v1/upload", "", h.upload(t, apiKey, true, uploadPart{"file", "b.txt", "y"}))
	for _, c := range []struct{ name, path string }{
		{"listing", "/files/" + u.SessionID},
		{"listing: rate limited", "/files/" + u.SessionID},
		{"download", "/download/" + u.SessionID + "/" + u.Files[0].FileID},
		{"download: rate limited", "/download/" + u.SessionID + "/" + u.Files[0].FileID},
	} {
		record(c.name, "GET", "/v1"+c.path, "", h.call(t, "GET", c.path, apiKey))
	}
	compareGoldenCalls(t, "testdata/limits_golden.json", got)
}
