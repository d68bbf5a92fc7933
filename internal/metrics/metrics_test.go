package metrics

import (
	"io"
	"net/http"
	"net/http/httptest"
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
