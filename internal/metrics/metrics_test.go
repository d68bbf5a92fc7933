package metrics

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
)

func scrape(t *testing.T, h http.Handler) string {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("scrape: status %d", rec.Code)
	}
	b, _ := io.ReadAll(rec.Body)
	return string(b)
}

func TestHubExposition(t *testing.T) {
	m := NewHub(func() float64 { return 3 })
	m.Assignments.WithLabelValues("fulfilled").Inc()
	m.LeaseWait.WithLabelValues("assignment").Observe(0.2)
	out := scrape(t, m.Handler())
	for _, want := range []string{
		"codellm_hub_workers_online 3\n",
		`codellm_hub_assignments_total{state="fulfilled"} 1` + "\n",
		`codellm_hub_assignments_total{state="enqueued"} 0` + "\n", // pre-created
		`codellm_hub_lease_wait_seconds_count{result="assignment"} 1` + "\n",
		`codellm_hub_lease_wait_seconds_count{result="empty"} 0` + "\n",
		"go_goroutines ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("exposition lacks %q", want)
		}
	}
}

func TestServiceKillReasonsPrecreated(t *testing.T) {
	m := NewService(func() float64 { return 1 })
	out := scrape(t, m.Handler())
	for _, r := range KillReasons {
		if !strings.Contains(out, `codellm_kills_total{reason="`+r+`"} 0`) {
			t.Errorf("kill reason %q not pre-created", r)
		}
	}
	if !strings.Contains(out, "codellm_runs_in_flight 1\n") {
		t.Error("runs_in_flight does not report the callback's value")
	}
}

// The worker's exposition is exactly docs/operator.md's codellm_worker_ table: every documented metric
// with its type and labels, and no undocumented codellm_ metric; every scope and reason pre-created.
func TestWorkerExpositionMatchesDocs(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operator.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `(codellm_worker_[a-z0-9_]+)` \\| (counter|gauge|histogram) \\| ([^|]*) \\|")
	documented := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(string(doc), -1) {
		labels := strings.Split(strings.ReplaceAll(strings.ReplaceAll(strings.TrimSpace(m[3]), "`", ""), " ", ""), ",")
		sort.Strings(labels)
		documented[m[1]] = m[2] + " " + strings.Join(labels, ",")
	}
	w := NewWorker()
	out := scrape(t, w.Handler())
	exposed := map[string]string{}
	for _, mf := range regexp.MustCompile(`(?m)^# TYPE (codellm_\S+) (\S+)$`).FindAllStringSubmatch(out, -1) {
		sample := regexp.MustCompile(`(?m)^` + mf[1] + `\{([^}]*)\}`).FindStringSubmatch(out)
		var labels []string
		for _, l := range regexp.MustCompile(`([a-z_]+)="`).FindAllStringSubmatch(sample[1], -1) {
			labels = append(labels, l[1])
		}
		sort.Strings(labels)
		exposed[mf[1]] = mf[2] + " " + strings.Join(labels, ",")
	}
	if len(documented) != 2 || fmt.Sprint(documented) != fmt.Sprint(exposed) {
		t.Fatalf("documented %v, exposed %v", documented, exposed)
	}
	for _, scope := range EgressScopes {
		for _, want := range []string{`codellm_worker_egress_connections_total{decision="refused",reason="byte_limit",scope="` + scope + `"} 0`,
			`codellm_worker_egress_bytes_total{direction="received",scope="` + scope + `"} 0`} {
			if !strings.Contains(out, want) {
				t.Errorf("not pre-created: %s", want)
			}
		}
	}
}
