package worker

// LibreChat's Code Interpreter end to end: the hub driven exactly as LibreChat's client calls it
// (danny-avila/LibreChat api/server/services/Files/Code/crud.js and process.js, danny-avila/agents
// src/tools/CodeExecutor.ts), a worker running codellm's runner in the sandbox.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/codellm/codellm/internal/hub"
	"github.com/codellm/codellm/internal/hub/filestore"
	"github.com/codellm/codellm/internal/wire"
)

var librechatID = regexp.MustCompile(`^[A-Za-z0-9_-]{21}$`)

func requireSandbox() bool { return os.Getenv("CODELLM_REQUIRE_SANDBOX") == "1" }

func withFiles(t testing.TB) func(*hub.Config) {
	return func(c *hub.Config) {
		fs, err := filestore.OpenDir(filepath.Join(t.TempDir(), "files"), c.FileLimits)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = fs.Close() })
		c.Files = fs
	}
}

// libreChatWorker starts a hub with file routes and one worker named name on sup, ready (start stops the worker when
// the test ends).
func libreChatWorker(t *testing.T, name string, sup Supervisor) (*testHub, *running) {
	t.Helper()
	h := newTestHub(t, withFiles(t))
	id, path := h.pair(t, name)
	r := start(t, baseConfig(h, id, path, sup))
	h.waitReady(t, name)
	return h, r
}

// uploadLikeLibreChat posts one file as crud.js's uploadCodeEnvFile does: form-data with entity_id and
// file, Content-Type overridden to a bare multipart/form-data, User-Id and X-API-Key headers.
func uploadLikeLibreChat(t *testing.T, h *testHub, name string, data []byte) (sid, fid string) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	_ = mw.WriteField("entity_id", "agent_1")
	fw, _ := mw.CreateFormFile("file", name)
	_, _ = fw.Write(data)
	_ = mw.Close()
	req, _ := http.NewRequest(http.MethodPost, h.base+"/upload", &buf)
	req.Header.Set("Content-Type", "multipart/form-data")
	req.Header.Set("User-Agent", "LibreChat/1.0")
	req.Header.Set("User-Id", "user_1")
	req.Header.Set("X-API-Key", apiKey)
	r := doHTTP(t, req)
	var res struct {
		Message   string                              `json:"message"`
		SessionID string                              `json:"session_id"`
		Files     []struct{ FileID, Filename string } `json:"files"`
	}
	if r.status != 200 || json.Unmarshal(r.body, &res) != nil || res.Message != "success" || len(res.Files) != 1 {
		t.Fatalf("upload: %d %s", r.status, r.body)
	}
	return res.SessionID, res.Files[0].FileID
}

func download(t *testing.T, h *testHub, sid, fid string) []byte {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, h.base+"/download/"+sid+"/"+fid, nil)
	req.Header.Set("X-API-Key", apiKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("download %s/%s: %d %s", sid, fid, resp.StatusCode, b)
	}
	return b
}

type execFile struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	SessionID string `json:"session_id"`
}

type execResult struct {
	SessionID string     `json:"session_id"`
	Stdout    string     `json:"stdout"`
	Stderr    string     `json:"stderr"`
	Files     []execFile `json:"files"`
}

func execLikeLibreChat(t *testing.T, h *testHub, body map[string]any) execResult {
	t.Helper()
	b, _ := json.Marshal(body)
	r := h.client(t, context.Background(), "/v1/exec", string(b), map[string]string{"User-Agent": "LibreChat/1.0"})
	var res execResult
	if r.status != 200 || json.Unmarshal(r.body, &res) != nil {
		t.Fatalf("exec: %d %s", r.status, r.body)
	}
	return res
}

const plotCode = `import csv
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
rows = list(csv.DictReader(open("/mnt/data/sales.csv")))
xs = [int(r["month"]) for r in rows]
ys = [float(r["amount"]) for r in rows]
plt.plot(xs, ys)
plt.savefig("/mnt/data/plot.png")
with open("/mnt/data/totals.csv", "w") as f:
    f.write("total\n%g\n" % sum(ys))
print("rows", len(rows))
`

// TestLibreChatFileRoundTrip: upload a CSV, python reads it from /mnt/data and writes a matplotlib PNG
// and a CSV, both come back as references, download byte-identical, and are used again in a second exec
// of the same session.
func TestLibreChatFileRoundTrip(t *testing.T) {
	if err := exec.Command("/usr/bin/python3", "-c", "import matplotlib").Run(); err != nil {
		if requireSandbox() {
			t.Fatalf("python3-matplotlib is not installed (.ci/run installs it): %v", err)
		}
		t.Skip("python3-matplotlib is not installed")
	}
	for _, stateful := range []bool{false, true} {
		name := map[bool]string{false: "stateless", true: "stateful"}[stateful]
		t.Run(name, func(t *testing.T) {
			h, _ := libreChatWorker(t, "lc-"+name, newEmbedded(t, stateful))

			csv := []byte("month,amount\n1,10.5\n2,20\n3,7.25\n")
			upSID, upFID := uploadLikeLibreChat(t, h, "sales.csv", csv)
			first := execLikeLibreChat(t, h, map[string]any{"lang": "py", "code": plotCode, "user_id": "user_1",
				"files": []execFile{{ID: upFID, Name: "sales.csv", SessionID: upSID}}})
			if first.Stdout != "rows 3\n" || !librechatID.MatchString(first.SessionID) {
				t.Fatalf("first exec: %+v", first)
			}
			got := map[string]execFile{}
			for _, f := range first.Files {
				if !librechatID.MatchString(f.ID) {
					t.Fatalf("file id %q fails LibreChat's isValidID", f.ID)
				}
				got[f.Name] = f
			}
			if len(got) != 2 || got["plot.png"].ID == "" || got["totals.csv"].ID == "" {
				t.Fatalf("generated files %+v (want plot.png and totals.csv only: no input, no byproducts)", first.Files)
			}
			png := download(t, h, first.SessionID, got["plot.png"].ID)
			if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) {
				t.Fatalf("plot.png is not a PNG: %q", png[:min(16, len(png))])
			}
			if totals := download(t, h, first.SessionID, got["totals.csv"].ID); string(totals) != "total\n37.75\n" {
				t.Fatalf("totals.csv = %q", totals)
			}
			// LibreChat's next call sends the conversation's files by reference in the same session; the
			// program sees exactly the bytes that were downloaded.
			sum := sha256.Sum256(png)
			second := execLikeLibreChat(t, h, map[string]any{"lang": "py", "session_id": first.SessionID,
				"code":  "import hashlib\nprint(hashlib.sha256(open('/mnt/data/plot.png','rb').read()).hexdigest())\nprint(open('/mnt/data/totals.csv').read().split()[1])",
				"files": []execFile{got["plot.png"], got["totals.csv"], {ID: upFID, Name: "sales.csv", SessionID: upSID}}})
			if want := hex.EncodeToString(sum[:]) + "\n37.75\n"; second.Stdout != want || second.SessionID != first.SessionID {
				t.Fatalf("second exec: %+v, want stdout %q in session %s", second, want, first.SessionID)
			}
			if len(second.Files) != 0 {
				t.Fatalf("unchanged inputs reported as generated: %+v", second.Files)
			}
		})
	}
}

// TestStatefulTimeoutKeepsServing: `while True: pass` on a stateful worker returns 200 with its partial
// output and a timeout note; the worker keeps running and the session keeps its files.
func TestStatefulTimeoutKeepsServing(t *testing.T) {
	h, r := libreChatWorker(t, "lc-loop", newEmbedded(t, true))
	first := execLikeLibreChat(t, h, map[string]any{"lang": "py", "code": "open('state.txt','w').write('kept')\nprint('ready')"})
	rep := h.client(t, context.Background(), "/v1/exec",
		`{"lang":"py","session_id":"`+first.SessionID+`","code":"print('started', flush=True)\nwhile True: pass"}`,
		map[string]string{"X-Codellm-Timeout-Ms": "3000"})
	m := decodeExec(t, rep)
	if rep.status != 200 || m["stdout"] != "started\n" || !strings.Contains(m["stderr"].(string), "timed out") {
		t.Fatalf("endless loop: %d %s", rep.status, rep.body)
	}
	again := execLikeLibreChat(t, h, map[string]any{"lang": "py", "session_id": first.SessionID, "code": "print(open('state.txt').read())"})
	if again.Stdout != "kept\n" {
		t.Fatalf("the session after the timeout: %+v", again)
	}
	select {
	case err := <-r.done:
		t.Fatalf("the worker exited after the timeout: %v", err)
	default:
	}
}

// TestLibreChatBodyTimeout: the body's timeout (ms, as LibreChat's CodeExecutor may send it) ends the run
// at that limit on the real worker: the reply is 200 with the partial output and the runner's timeout
// note naming the body's limit, not the hub's 300 s default.
func TestLibreChatBodyTimeout(t *testing.T) {
	h, _ := libreChatWorker(t, "lc-timeout", newEmbedded(t, false))
	rep := h.client(t, context.Background(), "/v1/exec", `{"lang":"bash","code":"echo started; sleep 60","timeout":1500}`, nil)
	m := decodeExec(t, rep)
	if stderr, _ := m["stderr"].(string); rep.status != 200 || m["stdout"] != "started\n" || !strings.Contains(stderr, "timed out after 1500 ms") {
		t.Fatalf("timeout 1500: %d %s", rep.status, rep.body)
	}
}

// TestChatThroughEndpointWorker: a worker that forwards assignments over HTTP (the endpoint supervisor,
// as LibreChat's own worker does) to codellm's runner routes in stateful endpoint mode
// (/sessions/{runtimeSessionId}/api/v2): the hub's chat assignment (X-Codellm-Operation) reaches the
// chat pipeline, and exec sessions keep their files through the session path.
func TestChatThroughEndpointWorker(t *testing.T) {
	emb := newEmbedded(t, true)
	mux := http.NewServeMux()
	emb.Runner.RegisterBridge(func(method, pattern, _ string, h http.HandlerFunc) { mux.HandleFunc(method+" "+pattern, h) }, emb.Chat)
	var ops []string
	var mu sync.Mutex
	rs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		ops = append(ops, r.URL.Path+" "+r.Header.Get(wire.OperationHeader))
		mu.Unlock()
		mux.ServeHTTP(w, r)
	}))
	defer rs.Close()
	ep, err := NewEndpoint(rs.URL+"/sessions/{runtimeSessionId}/api/v2", false, nil)
	if err != nil || !ep.Stateful() {
		t.Fatalf("endpoint: %v", err)
	}
	h, _ := libreChatWorker(t, "lc-ep", ep)

	chat := `{"model":"codellm","messages":[{"role":"user","content":"` + "```bash\\necho '{\\\"answer\\\":\\\"via the worker\\\"}'\\n```" + `"}]}`
	rep := h.client(t, context.Background(), "/v1/chat/completions", chat, nil)
	if rep.status != 200 || !strings.Contains(string(rep.body), `"name":"finish"`) || !strings.Contains(string(rep.body), `via the worker`) {
		t.Fatalf("chat through the worker: %d %s (runner saw %q)", rep.status, rep.body, ops)
	}
	first := execLikeLibreChat(t, h, map[string]any{"lang": "py", "code": "open('/mnt/data/n.txt','w').write('7')\nprint('ok')"})
	second := execLikeLibreChat(t, h, map[string]any{"lang": "py", "session_id": first.SessionID, "code": "print(open('n.txt').read())"})
	if first.Stdout != "ok\n" || second.Stdout != "7\n" {
		t.Fatalf("exec through the session path: %+v %+v", first, second)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ops) < 3 || !strings.HasSuffix(ops[0], "/api/v2/execute "+wire.OperationChat) || !strings.HasPrefix(ops[1], "/sessions/"+first.SessionID+"/api/v2/execute") {
		t.Fatalf("runner saw %q", ops)
	}
}
