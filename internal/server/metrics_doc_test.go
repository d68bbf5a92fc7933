package server_test

import (
	"bufio"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/codellm/codellm/internal/server"
	"github.com/codellm/codellm/internal/testhelp"
)

// documentedMetric is one row of the metrics tables in docs/operator.md.
type documentedMetric struct {
	name, typ string
	labels    []string
	section   string // the "### " heading the row is under, e.g. "5.1 Service (`codellm serve`)"
}

var docRow = regexp.MustCompile("^\\| `(codellm_[a-z0-9_]+)` \\| (counter|gauge|histogram|summary) \\| ([^|]*) \\|")

// documentedMetrics parses the metric tables of docs/operator.md, so that the operator's list and the
// exposition cannot drift apart.
func documentedMetrics(t *testing.T) []documentedMetric {
	t.Helper()
	f, err := os.Open("../../docs/operator.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []documentedMetric
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if h, ok := strings.CutPrefix(sc.Text(), "### "); ok {
			section = h
		}
		m := docRow.FindStringSubmatch(sc.Text())
		if m == nil {
			if strings.HasPrefix(sc.Text(), "| `codellm_") {
				t.Fatalf("docs/operator.md: metric row not in the form | `name` | type | labels | meaning |: %q", sc.Text())
			}
			continue
		}
		d := documentedMetric{name: m[1], typ: m[2], section: section}
		for _, l := range strings.Split(m[3], ",") {
			if l = strings.Trim(strings.TrimSpace(l), "`"); l != "" && l != "—" {
				d.labels = append(d.labels, l)
			}
		}
		out = append(out, d)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// exposition indexes a Prometheus text exposition: TYPE per family and the label names seen per family.
func exposition(body string) (types map[string]string, labels map[string][]string) {
	types, labels = map[string]string{}, map[string][]string{}
	sample := regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})? `)
	label := regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="`)
	for _, line := range strings.Split(body, "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			types[f[2]] = f[3]
			continue
		}
		m := sample.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		family := m[1]
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(family, suf); ok && types[base] == "histogram" {
				family = base
			}
		}
		for _, l := range label.FindAllStringSubmatch(m[2], -1) {
			if l[1] != "le" && !slices.Contains(labels[family], l[1]) {
				labels[family] = append(labels[family], l[1])
			}
		}
	}
	return types, labels
}

// After a real run, /metrics exposes every service metric docs/operator.md lists, with the documented
// type and labels, and exposes no codellm_ metric the document does not list. The hub's table is checked
// the same way by the hub's tests.
func TestDocumentedMetricsExposed(t *testing.T) {
	docs := documentedMetrics(t)
	// Only the service's own table: the worker's (codellm_worker_egress_*, its own listener, tested in
	// internal/worker) and the hub's are their own.
	var service []documentedMetric
	for _, d := range docs {
		if strings.HasPrefix(d.section, "5.1 ") || strings.HasPrefix(d.section, "5.1.1 ") {
			service = append(service, d)
		}
	}
	if len(service) < 8 {
		t.Fatalf("docs/operator.md lists %d service metrics; the contract (§1.3) names 8", len(service))
	}

	ts := startServer(t, options{cfg: func(c *server.Config) { c.APIKey = "metrics-doc-key-0123456789abcdefghij" }})
	status, _, body := ts.post(t, "/v1/chat/completions", chat(block("bash", "echo '{\"answer\":\"ok\"}'")))
	if status != 200 {
		t.Fatalf("chat: %d %s", status, body)
	}
	// An authentication refusal and a last block over the output cap, for the series that need them. The
	// block sleeps after its output so that the cap's kill, not its own exit 0, ends it (head alone could
	// finish writing before the kill lands, and exit_code="0" would then count 2).
	if status, _ := testhelp.GetBearer(t, ts.URL+"/v1/models", "wrong-key"); status != 401 {
		t.Fatalf("wrong key: %d", status)
	}
	if status, _, body := ts.post(t, "/v1/chat/completions", chat(block("bash", "head -c 2000000 /dev/zero; exec sleep 30"))); status != 422 {
		t.Fatalf("output limit: %d %s", status, body)
	}
	status, _, body = ts.get(t, "/metrics")
	if status != 200 {
		t.Fatalf("/metrics: %d %s", status, body)
	}
	types, labels := exposition(string(body))
	for _, d := range service {
		if d.name == "codellm_sandbox_fallbacks_total" && types[d.name] == "" && ts.srv.Readiness().Sandbox != "besteffort" {
			continue // counts besteffort runs without every mechanism: no series in another mode
		}
		if got := types[d.name]; got != d.typ {
			t.Errorf("%s: exposed as %q, documented as %q", d.name, got, d.typ)
			continue
		}
		got := slices.Clone(labels[d.name])
		want := slices.Clone(d.labels)
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s: labels %v exposed, %v documented", d.name, got, want)
		}
	}
	for name := range types {
		if strings.HasPrefix(name, "codellm_") && !slices.ContainsFunc(service, func(d documentedMetric) bool { return d.name == name }) {
			t.Errorf("%s is exposed but not documented in docs/operator.md", name)
		}
	}
	// The runs were observed, not just registered: one block each, their setup times and durations, under
	// codellm's names and trip2g's.
	for _, want := range []string{
		"codellm_sandbox_setup_seconds_count 2\n",
		"codellm_run_blocks_count 2\n",
		`codellm_run_duration_seconds_count{outcome="ok"} 1` + "\n",
		`codellm_http_requests_total{code="",route="chat",status="200"} 1` + "\n",
		`codellm_requests_total{endpoint="chat_completions",status="200"} 1` + "\n",
		`codellm_requests_total{endpoint="chat_completions",status="422"} 1` + "\n",
		`codellm_request_duration_seconds_count{endpoint="chat_completions"} 2` + "\n",
		"codellm_requests_in_flight 0\n",
		`codellm_auth_total{lane="apikey",result="allowed"} 3` + "\n", // two chats and this scrape
		`codellm_auth_total{lane="apikey",result="denied"} 1` + "\n",
		`codellm_blocks_total{outcome="ok",program="bash"} 1` + "\n",
		`codellm_blocks_total{outcome="output_limit",program="bash"} 1` + "\n",
		`codellm_block_exit_codes_total{exit_code="0",program="bash"} 1` + "\n",
		`codellm_block_stdout_truncated_total{program="bash"} 1` + "\n",
		`codellm_block_stdout_bytes_count{program="bash"} 2` + "\n",
		`codellm_exec_errors_total{kind="output_limit"} 1` + "\n",
		`codellm_exec_errors_total{kind="nonzero_exit"} 0` + "\n",
		"codellm_request_blocks_count 2\n",
		`codellm_changes_total{kind="write"} 0` + "\n",
		`codellm_config_info{allowed_programs="`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics after the runs lacks %q:\n%s", want, grepLines(string(body), "codellm_"))
		}
	}
}
