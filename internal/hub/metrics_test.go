package hub

import (
	"bufio"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/codellm/codellm/internal/bridge"
)

// /metrics on the hub is for the operator only: without the admin token a scrape is refused, with it
// the exposition counts the online worker, the assignment it ran and the lease that delivered it.
func TestHubMetrics(t *testing.T) {
	h := newTestHub(t, nil)
	scrape := func(tok string) reply {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, h.srv.URL+"/metrics", nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		return doHTTP(t, req)
	}
	if r := scrape(""); r.status != http.StatusUnauthorized {
		t.Fatalf("anonymous scrape: %d %s", r.status, r.body)
	}
	if r := scrape(apiKey); r.status != http.StatusUnauthorized {
		t.Fatalf("client-key scrape: %d %s", r.status, r.body)
	}
	r := scrape(adminToken)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), "codellm_hub_workers_online 0\n") {
		t.Fatalf("empty hub scrape: %d %s", r.status, r.body)
	}

	w := newWorker(t, h, "m-worker")
	w.pair(h)
	w.mustRegister()
	stop := w.serve(func(a *bridge.Assignment) bridge.Settlement { return runnerReply(a, w.incarnation) })
	res := h.client(t, "/v1/exec", `{"lang":"py","code":"print(1)"}`, nil)
	stop()
	if res.status != http.StatusOK {
		t.Fatalf("exec: %d %s", res.status, res.body)
	}
	r = scrape(adminToken)
	if r.status != http.StatusOK {
		t.Fatalf("scrape: %d %s", r.status, r.body)
	}
	body := string(r.body)
	for _, want := range []string{
		"codellm_hub_workers_online 1\n",
		`codellm_hub_assignments_total{state="enqueued"} 1` + "\n",
		`codellm_hub_assignments_total{state="fulfilled"} 1` + "\n",
		`codellm_hub_lease_wait_seconds_count{result="assignment"} 1` + "\n",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
	checkDocumented(t, body)
	if r := doHTTP(t, mustReq(t, http.MethodPost, h.srv.URL+"/metrics", adminToken)); r.status != http.StatusMethodNotAllowed {
		t.Errorf("POST /metrics: %d", r.status)
	}
}

// A hub without an admin token has no operator, so its metrics stay closed (fail closed).
func TestHubMetricsNoAdminToken(t *testing.T) {
	h := newTestHub(t, func(c *Config) { c.AdminToken = ""; c.WorkerToken = "w"; c.AuthMode = AuthStatic })
	r := doHTTP(t, mustReq(t, http.MethodGet, h.srv.URL+"/metrics", ""))
	if r.status != http.StatusServiceUnavailable {
		t.Fatalf("scrape without admin token configured: %d %s", r.status, r.body)
	}
}

func TestAssignmentState(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{errReassign, "withdrawn"},
		{bridge.ErrAssignmentExpired, "expired"},
		{errOutcomeUnknown, "worker_offline"},
		{errUnavailable("x"), "failed"},
	} {
		if got := assignmentState(nil, c.err); got != c.want {
			t.Errorf("assignmentState(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

func mustReq(t testing.TB, method, url, tok string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	return req
}

// checkDocumented compares the hub rows of docs/operator.md's metric tables with a live exposition:
// every documented hub metric is exposed with its type and labels, and nothing named codellm_ is
// exposed undocumented.
func checkDocumented(t *testing.T, body string) {
	t.Helper()
	f, err := os.Open("../../docs/operator.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	row := regexp.MustCompile("^\\| `(codellm_hub_[a-z0-9_]+)` \\| (counter|gauge|histogram) \\| ([^|]*) \\|")
	documented := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := row.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		name, typ := m[1], m[2]
		documented[name] = true
		if !strings.Contains(body, "# TYPE "+name+" "+typ+"\n") {
			t.Errorf("%s is documented as a %s but not exposed as one", name, typ)
		}
		for _, l := range strings.Split(m[3], ",") {
			l = strings.Trim(strings.TrimSpace(l), "`")
			if l == "" || l == "—" {
				continue
			}
			series := regexp.MustCompile("(?m)^" + regexp.QuoteMeta(name) + `(_bucket|_sum|_count)?\{([^}]*,)?` + l + `="`)
			if !series.MatchString(body) {
				t.Errorf("%s: documented label %q not exposed", name, l)
			}
		}
	}
	if len(documented) < 3 {
		t.Fatalf("docs/operator.md documents %d hub metrics, want online workers, assignments and lease wait", len(documented))
	}
	for _, line := range strings.Split(body, "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[1] == "TYPE" && strings.HasPrefix(f[2], "codellm_") && !documented[f[2]] {
			t.Errorf("%s is exposed by the hub but not documented in docs/operator.md", f[2])
		}
	}
}

// BenchmarkHubMetricsScrape is the cost of one /metrics scrape of a hub with ten online workers on the
// embedded store (the online count is read from the store at scrape time).
func BenchmarkHubMetricsScrape(b *testing.B) {
	h := newTestHub(b, nil)
	for i := range 10 {
		w := newWorker(b, h, "bench-"+string(rune('a'+i)))
		w.pair(h)
		w.mustRegister()
	}
	req := mustReq(b, http.MethodGet, h.srv.URL+"/metrics", adminToken)
	for b.Loop() {
		if r := doHTTP(b, req); r.status != http.StatusOK || !strings.Contains(string(r.body), "codellm_hub_workers_online 10\n") {
			b.Fatalf("scrape: %d", r.status)
		}
	}
}
