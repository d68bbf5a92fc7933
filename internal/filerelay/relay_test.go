package filerelay

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

type goldenExchange struct {
	Method  string            `json:"method"`
	Path    string            `json:"path"`
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
	Status  int               `json:"status"`
}

type goldenCase struct {
	Name            string          `json:"name"`
	Request         goldenExchange  `json:"request"`
	UpstreamRequest *goldenExchange `json:"upstream_request"`
	UpstreamReply   *goldenExchange `json:"upstream_reply"`
	Response        goldenExchange  `json:"response"`
}

// standIn is the test's stand-in for the Code API's egress gateway (upstream's service cannot run here):
// it records what reached it and answers what the case says.
type standIn struct {
	mu    sync.Mutex
	seen  []goldenExchange
	reply *goldenExchange
}

func (s *standIn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	h := map[string]string{}
	for k := range r.Header {
		switch k {
		case "User-Agent", "Accept-Encoding", "Content-Length": // Go's transport, not the relay's choice
		default:
			h[k] = r.Header.Get(k)
		}
	}
	s.mu.Lock()
	s.seen = append(s.seen, goldenExchange{Method: r.Method, Path: r.URL.RequestURI(), Headers: h, Body: string(b)})
	reply := s.reply
	s.mu.Unlock()
	if reply == nil {
		w.WriteHeader(http.StatusTeapot)
		return
	}
	for k, v := range reply.Headers {
		w.Header().Set(k, v)
	}
	w.WriteHeader(reply.Status)
	io.WriteString(w, reply.Body)
}

func canonical(h map[string]string) http.Header {
	out := http.Header{}
	for k, v := range h {
		out.Set(k, v)
	}
	return out
}

func sameHeaders(t *testing.T, what string, got http.Header, want map[string]string, ignore ...string) {
	t.Helper()
	for _, k := range ignore {
		got.Del(k)
	}
	w := canonical(want)
	if len(got) != len(w) {
		t.Errorf("%s headers = %v, want exactly %v", what, got, w)
		return
	}
	for k := range w {
		if got.Get(k) != w.Get(k) {
			t.Errorf("%s header %s = %q, want %q", what, k, got.Get(k), w.Get(k))
		}
	}
}

func TestGoldenExchanges(t *testing.T) {
	raw, err := os.ReadFile("testdata/relay_golden.json")
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		MaxBytes int64        `json:"max_bytes"`
		Cases    []goldenCase `json:"cases"`
	}
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	for _, tc := range g.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			up := &standIn{reply: tc.UpstreamReply}
			us := httptest.NewServer(up)
			defer us.Close()
			r, err := New(Config{Upstream: us.URL + "/egress/", Token: "relay-secret", MaxBytes: g.MaxBytes,
				Timeout: 5 * time.Second, MaxConcurrent: 2})
			if err != nil {
				t.Fatal(err)
			}
			rs := httptest.NewServer(r)
			defer rs.Close()
			req, _ := http.NewRequest(tc.Request.Method, rs.URL+tc.Request.Path, strings.NewReader(tc.Request.Body))
			for k, v := range tc.Request.Headers {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultTransport.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.Response.Status || string(body) != tc.Response.Body {
				t.Errorf("response %d %q, want %d %q", resp.StatusCode, body, tc.Response.Status, tc.Response.Body)
			}
			sameHeaders(t, "response", resp.Header, tc.Response.Headers, "Date", "Content-Length")
			if tc.UpstreamRequest == nil {
				if len(up.seen) != 0 {
					t.Fatalf("the gateway was reached: %+v", up.seen)
				}
				return
			}
			if len(up.seen) != 1 {
				t.Fatalf("the gateway saw %d requests, want 1", len(up.seen))
			}
			s, want := up.seen[0], tc.UpstreamRequest
			if s.Method != want.Method || s.Path != want.Path || s.Body != want.Body {
				t.Errorf("gateway saw %s %s %q, want %s %s %q", s.Method, s.Path, s.Body, want.Method, want.Path, want.Body)
			}
			sameHeaders(t, "upstream request", canonical(s.Headers), want.Headers)
		})
	}
}

func relayHeaders() http.Header {
	h := http.Header{}
	h.Set(TokenHeader, "relay-secret")
	h.Set(GrantHeader, "g")
	return h
}

// A third request while two are in flight is refused with 503 before reaching the gateway; once one
// finishes, the next is admitted.
func TestConcurrencyBound(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan struct{}, 8)
	var reached sync.WaitGroup
	us := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
		io.WriteString(w, "ok")
	}))
	defer us.Close()
	r, err := New(Config{Upstream: us.URL, Token: "relay-secret", MaxBytes: 1024, Timeout: 10 * time.Second, MaxConcurrent: 2})
	if err != nil {
		t.Fatal(err)
	}
	get := func() int {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/sessions/s/objects/o", nil)
		req.Header = relayHeaders()
		r.ServeHTTP(rec, req)
		return rec.Code
	}
	codes := make(chan int, 2)
	for range 2 {
		reached.Add(1)
		go func() { defer reached.Done(); codes <- get() }()
	}
	<-arrived
	<-arrived
	if c := get(); c != http.StatusServiceUnavailable {
		t.Fatalf("third concurrent request got %d, want 503", c)
	}
	close(release)
	reached.Wait()
	if a, b := <-codes, <-codes; a != 200 || b != 200 {
		t.Fatalf("admitted requests got %d, %d", a, b)
	}
	if c := get(); c != http.StatusOK {
		t.Fatalf("after the bound cleared: %d", c)
	}
}

func TestUpstreamTimeoutIs502(t *testing.T) {
	stop := make(chan struct{})
	us := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-stop:
		case <-r.Context().Done():
		}
	}))
	defer us.Close()
	defer close(stop)
	r, err := New(Config{Upstream: us.URL, Token: "relay-secret", MaxBytes: 1024, Timeout: 50 * time.Millisecond, MaxConcurrent: 1})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/sessions/s/objects/o", nil)
	req.Header = relayHeaders()
	r.ServeHTTP(rec, req)
	if rec.Code != http.StatusBadGateway || rec.Body.Len() != 0 {
		t.Fatalf("timed-out exchange: %d %q", rec.Code, rec.Body)
	}
}

func TestValidateUpstream(t *testing.T) {
	for in, want := range map[string]string{
		"https://code.example/egress":       "",
		"http://127.0.0.1:8080/egress":      "",
		"http://host.docker.internal:3080/": "",
		"http://code.example/egress":        "must use HTTPS",
		"https://user:pw@code.example/":     "without credentials",
		"https://code.example/?x=1":         "without credentials, query",
		"https://code.example/#f":           "fragment",
		"ftp://code.example/":               "must be an HTTP URL",
		"":                                  "must be an HTTP URL",
	} {
		_, err := ValidateUpstream(in)
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("ValidateUpstream(%q) = %v, want %q", in, err, want)
		}
	}
	if _, err := New(Config{Upstream: "https://x.example", MaxBytes: 1, Timeout: 1, MaxConcurrent: 1}); err == nil ||
		!strings.Contains(err.Error(), "token is required") {
		t.Fatalf("New without token: %v", err)
	}
}
