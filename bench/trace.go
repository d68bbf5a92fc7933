package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// TraceResult is row 6: where one block's wall time goes at c=1, from a `-tags codellm_trace` build whose
// server (sandbox.Trace) and helper (hook.Trace) stamp CLOCK_MONOTONIC at each step of the request's path.
type TraceResult struct {
	Requests int         `json:"requests"`
	Steps    []TraceStep `json:"steps"`
}

// TraceStep is one stamped step: the median over the requests of its offset from the client's send, and
// of the time since the step before it in the same request.
type TraceStep struct {
	Label  string  `json:"label"`
	What   string  `json:"what"`
	AtP50  float64 `json:"at_p50_ms"`
	GapP50 float64 `json:"since_previous_p50_ms"`
	Seen   int     `json:"seen"`
}

// traceWhat names the trace points (the labels in sandbox and hook), and is the order of the path.
var traceWhat = []struct {
	label, what string
	behind      bool // off the reply's path since session 5: it does not advance the path (summarizeTrace)
}{
	{"C.send", "client: request sent", false},
	{"r.begin", "server: runner handler entered", false},
	{"s.spawn", "server: block start (workspace, files, run taken)", false},
	{"s.raw", "server: raw helper asked of the spawner", false},
	{"s.rawforked", "server: raw helper forked (the spawner's reply)", false},
	{"s.delivered", "server: descriptors and spec sent to the helper", false},
	{"h.spec", "helper: spec read", false},
	{"h.world", "helper: block root, hostname, workdir", false},
	{"h.locked", "helper: rlimits, no_new_privs, Landlock, caps, seccomp", false},
	{"h.fork", "init: about to fork the program", false},
	{"h.forked", "init: program forked and exec'd", false},
	{"s.started", "server: Started received", false},
	{"s.progstatus", "server: the program's wait status received", false},
	{"s.reaped", "server: result published (program's status, block stats)", false},
	// Since the init ends its namespace before it reports, these come behind the reply (Run.CloseLater)
	// and are seen only when a request still waits for them.
	{"s.exited", "server: the init has exited (namespaces torn down)", true},
	{"s.close", "server: run close begins", true},
	{"s.close.done", "server: run closed", true},
	{"r.end", "server: runner handler returns", false},
	{"C.recv", "client: reply received", false},
}

// measureTrace builds codellm with the trace points, runs its `/api/v2/execute` bash program at c=1 for d
// and reports the medians. The helper's stamps arrive in each reply's stderr, the server's in a file;
// requests are sequential, so every server stamp between a send and its reply belongs to that request.
func measureTrace(d time.Duration, logf func(string, ...any)) (*TraceResult, error) {
	dir, err := serverDir("codellm-bench-trace-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bin, err := buildCodellmTags(dir, "codellm-trace", "codellm_trace")
	if err != nil {
		return nil, err
	}
	file := filepath.Join(dir, "server.trace")
	s, err := startServerEnv(bin, dir, []string{"CODELLM_TRACE_FILE=" + file})
	if err != nil {
		return nil, err
	}
	defer s.stop()
	logf("trace: c=1 for %v", d)
	client := &http.Client{Timeout: time.Minute}
	body := programs[0].executeBody()
	if _, err := traceRequests(client, s.base, body, time.Second); err != nil { // warm-up
		return nil, err
	}
	reqs, err := traceRequests(client, s.base, body, d)
	if err != nil {
		return nil, err
	}
	server, err := readStamps(file, "S ")
	if err != nil {
		return nil, err
	}
	return summarizeTrace(reqs, server), nil
}

// stamp is one trace point: its label and CLOCK_MONOTONIC nanoseconds.
type stamp struct {
	label string
	ns    int64
}

func mono() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// traceRequests posts body sequentially for d; each request's stamps are the client's send and reply and
// the helper's lines ("T label ns") from the reply's stderr.
func traceRequests(client *http.Client, base, body string, d time.Duration) ([][]stamp, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var out [][]stamp
	for ctx.Err() == nil {
		t0 := mono()
		resp, err := client.Post(base+pathExecute, "application/json", strings.NewReader(body))
		if err != nil {
			return nil, err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		t1 := mono()
		if err != nil {
			return nil, err
		}
		var r struct {
			Run struct{ Stdout, Stderr string } `json:"run"`
		}
		if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &r) != nil || !strings.Contains(r.Run.Stdout, "answer") {
			return nil, fmt.Errorf("trace: %d %s", resp.StatusCode, b)
		}
		st := append([]stamp{{"C.send", t0}}, parseStamps(r.Run.Stderr, "T ")...)
		out = append(out, append(st, stamp{"C.recv", t1}))
	}
	return out, nil
}

// parseStamps reads "<prefix>label ns" lines.
func parseStamps(text, prefix string) []stamp {
	var out []stamp
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(strings.TrimPrefix(line, prefix))
		if !strings.HasPrefix(line, prefix) || len(f) != 2 {
			continue
		}
		if ns, err := strconv.ParseInt(f[1], 10, 64); err == nil {
			out = append(out, stamp{f[0], ns})
		}
	}
	return out
}

func readStamps(file, prefix string) ([]stamp, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("trace: the server wrote no stamps (was it built with -tags codellm_trace?): %w", err)
	}
	defer f.Close()
	var out []stamp
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		out = append(out, parseStamps(sc.Text(), prefix)...)
	}
	return out, sc.Err()
}

// summarizeTrace adds each request's server stamps (those between its send and reply, each label's first
// at or after the server's previous step) and takes, per label, the median offset from the send and the
// median gap since the previous label of the path. Steps that run behind the reply are shown when seen
// but do not move the path on.
func summarizeTrace(reqs [][]stamp, server []stamp) *TraceResult {
	slices.SortFunc(server, func(a, b stamp) int { return int(a.ns - b.ns) })
	at := map[string][]float64{}
	gap := map[string][]float64{}
	for _, r := range reqs {
		t0, t1 := r[0].ns, r[len(r)-1].ns
		lo, _ := slices.BinarySearchFunc(server, t0, func(s stamp, t int64) int { return int(s.ns - t) })
		var mine []stamp // the server's stamps in this request's window
		for _, s := range server[lo:] {
			if s.ns > t1 {
				break
			}
			mine = append(mine, s)
		}
		own := map[string]int64{} // the client's and the helper's stamps: this request's by construction
		for _, s := range r {
			if _, dup := own[s.label]; !dup {
				own[s.label] = s.ns
			}
		}
		prev, floor := t0, t0
		for _, w := range traceWhat {
			ns, ok := own[w.label]
			if !ok {
				// The server's stamps carry no request, and the one before's background close lands early
				// in this one's window: the first of the label at or after the server's previous step.
				i := slices.IndexFunc(mine, func(s stamp) bool { return s.label == w.label && s.ns >= floor })
				if i < 0 {
					continue
				}
				ns = mine[i].ns
				if !w.behind {
					floor = ns
				}
			}
			at[w.label] = append(at[w.label], float64(ns-t0)/1e6)
			gap[w.label] = append(gap[w.label], float64(ns-prev)/1e6)
			if !w.behind {
				prev = ns
			}
		}
	}
	res := &TraceResult{Requests: len(reqs)}
	for _, w := range traceWhat {
		if len(at[w.label]) == 0 {
			continue
		}
		res.Steps = append(res.Steps, TraceStep{Label: w.label, What: w.what, AtP50: round3(median(at[w.label])),
			GapP50: round3(median(gap[w.label])), Seen: len(at[w.label])})
	}
	return res
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// traceMarkdown renders row 6.
func traceMarkdown(t *TraceResult) string {
	if t == nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "### 6. One block's path at c=1 (`-tags codellm_trace` build, `/api/v2/execute` bash, %d sequential requests)\n\n", t.Requests)
	b.WriteString("| step | at (p50 ms) | since the step before (p50 ms) | seen |\n|---|---:|---:|---:|\n")
	for _, s := range t.Steps {
		fmt.Fprintf(&b, "| %s | %.2f | %.2f | %d |\n", s.What, s.AtP50, s.GapP50, s.Seen)
	}
	b.WriteString("\nEach column is a median of its own, so the gaps need not add up to the offsets. The helper's stamps travel in the block's stderr, which is why this build is for measuring only.\n\n")
	return b.String()
}
