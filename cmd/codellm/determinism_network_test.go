package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// helloRecorder is a TCP server that keeps the client random of each TLS ClientHello it gets (the 32 bytes
// after the record, handshake and version headers) and hangs up.
type helloRecorder struct {
	mu      sync.Mutex
	randoms []string
	port    string
}

func newHelloRecorder(t *testing.T) *helloRecorder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	h := &helloRecorder{port: strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			b := make([]byte, 43)
			if _, err := io.ReadFull(c, b); err == nil && b[0] == 0x16 && b[5] == 0x01 {
				h.mu.Lock()
				h.randoms = append(h.randoms, hex.EncodeToString(b[11:43]))
				h.mu.Unlock()
			}
			c.Close()
		}
	}()
	return h
}

func (h *helloRecorder) seen() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.randoms...)
}

// A deterministic run gets no network (issue 35 item 6): its random bytes, the TLS client random and key
// share included, follow from its seed (empty by default), so its ClientHellos repeated byte for byte
// and recorded HTTPS could be decrypted by anyone who knows the seed. Now the chat route and the runner
// refuse the combination with 400 before anything runs, a run narrowed to no network may still be
// deterministic, and serve refuses --deterministic with --network-allow at start. On the old code the
// deterministic runs reached the recorder with the same client random twice.
func TestDeterministicRunGetsNoNetwork(t *testing.T) {
	requireNative(t)
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed")
	}
	rec := newHelloRecorder(t)
	base := startServe(t, "--allowed-programs", "bash", "--network-allow", "localhost,127.0.0.1")
	determinismReady(t, base)
	script := "curl -sk --max-time 5 https://localhost:" + rec.port + "/ >/dev/null 2>&1; echo '{\"answer\":\"done\"}'"
	chat := func(meta map[string]any) (int, string) {
		body := map[string]any{"model": "codellm", "metadata": meta,
			"messages": []map[string]string{{"role": "user", "content": "```bash\n" + script + "\n```"}}}
		status, _, b := postRaw(t, base+"/v1/chat/completions", body, nil)
		return status, string(b)
	}
	det := map[string]any{"deterministic": "true", "seed": "recorded"}
	s1, out := chat(det)
	s2, _ := chat(det)
	if s1 == 200 || s2 == 200 {
		t.Fatalf("deterministic runs reached the network (client randoms seen: %q, one repeated: %v)", rec.seen(), repeated(rec.seen()))
	}
	if s1 != 400 || s2 != 400 || !strings.Contains(out, "invalid_metadata") || !strings.Contains(out, "TLS keys") || !strings.Contains(out, `network_allow \"\"`) {
		t.Fatalf("deterministic run with network: %d %s, want 400 naming the TLS keys and the fix", s1, out)
	}
	b, _ := json.Marshal(map[string]any{"language": "bash", "version": "*", "files": []map[string]string{{"content": script}},
		"metadata": map[string]any{"deterministic": "true"}})
	resp, err := http.Post(base+"/api/v2/execute", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	rb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(rb), "TLS keys") {
		t.Fatalf("runner API, deterministic with network: %d %s", resp.StatusCode, rb)
	}
	if got := rec.seen(); len(got) != 0 {
		t.Fatalf("a refused deterministic run reached the network: %q", got)
	}
	// Narrowed to no network, deterministic mode runs; without it, the network works.
	if status, out := chat(map[string]any{"deterministic": "true", "network_allow": ""}); status != 200 {
		t.Fatalf("deterministic run without network: %d %s", status, out)
	}
	if status, out := chat(nil); status != 200 || len(rec.seen()) != 1 {
		t.Fatalf("ordinary run with network: %d %s, hellos %q", status, out, rec.seen())
	}
	sout, err := exec.Command(binary(t), "serve", "--listen", freeAddr(t), "--deterministic", "--network-allow", "localhost").CombinedOutput()
	if code := exitCode(err); code != 2 || !strings.Contains(string(sout), "--deterministic cannot be the default with --network") {
		t.Fatalf("serve --deterministic --network-allow: exit %d\n%s", code, sout)
	}
}

// repeated reports whether any value occurs twice.
func repeated(vs []string) bool {
	seen := map[string]bool{}
	for _, v := range vs {
		if seen[v] {
			return true
		}
		seen[v] = true
	}
	return false
}

// exitCode is the exit status of a finished command's error (0 for nil, -1 when it did not exit).
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
}
