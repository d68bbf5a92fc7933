package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/egress"
	"github.com/codellm/codellm/internal/sandbox"
	"github.com/codellm/codellm/internal/testhelp"
)

// `codellm serve --network-allow` end to end: a block reaches an allowed name through the proxy, a
// request's metadata.network_allow narrows the list (and may not widen it), and decisions are counted.
func TestServeNetworkAllow(t *testing.T) {
	requireNative(t)
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed")
	}
	port := testhelp.Origin(t)
	bin := binary(t)
	addr := freeAddr(t)
	cmd := exec.Command(bin, "serve", "--listen", addr, "--work-dir", newWorkDir(t), "--allowed-programs", "bash", "--network-allow", "LOCALHOST.,127.0.0.1")
	logs := newSyncBuffer()
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer testhelp.StopGracefully(cmd.Process, exited, stopGrace)
	base := "http://" + addr
	for end := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get(base + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(end) {
			t.Fatalf("not ready; logs:\n%s", logs.String())
		}
	}
	// /readyz lists the normalised allow-list (spelling gone: case, trailing dot) and its digest.
	resp, err := http.Get(base + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	var rd struct {
		Mechanisms struct{ Egress *sandbox.EgressReport }
	}
	json.NewDecoder(resp.Body).Decode(&rd)
	resp.Body.Close()
	want, err := egress.ParseList("localhost,127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if e := rd.Mechanisms.Egress; e == nil || strings.Join(e.Allow, ",") != "127.0.0.1,localhost" || e.Digest != want.Digest() || e.MaxConnections != 64 {
		t.Fatalf("/readyz egress: %+v", rd.Mechanisms.Egress)
	}
	chat := func(script string, meta map[string]string) (int, string) {
		body := map[string]any{"model": "codellm", "messages": []map[string]string{{"role": "user", "content": "```bash\n" + script + "\n```"}}}
		if meta != nil {
			body["metadata"] = meta
		}
		b, _ := json.Marshal(body)
		resp, err := http.Post(base+"/v1/chat/completions", "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out bytes.Buffer
		out.ReadFrom(resp.Body)
		return resp.StatusCode, out.String()
	}
	// The block's answer carries what curl got (or its error), JSON-escaped by python-free bash.
	probe := `out=$(curl -sS "http://localhost:` + port + `/x" 2>&1); printf '{"answer":"%s"}' "$(printf %s "$out" | tr -d '"\\' | tr '\n' ' ')"`
	status, out := chat(probe, nil)
	if status != 200 || !strings.Contains(out, "origin saw localhost:"+port) {
		t.Fatalf("allowed name: %d %s\nlogs:\n%s", status, out, logs.String())
	}
	status, out = chat(probe, map[string]string{"network_allow": "127.0.0.1"})
	if status != 200 || !strings.Contains(out, "localhost is not on the network allow-list") {
		t.Fatalf("narrowed request: %d %s", status, out)
	}
	status, out = chat(probe, map[string]string{"network_allow": "example.com"})
	if status != 400 || !strings.Contains(out, "invalid_metadata") || !strings.Contains(out, "example.com") {
		t.Fatalf("wider request list: %d %s", status, out)
	}
	direct := `curl -sS --noproxy '*' "http://127.0.0.1:` + port + `/x" >/dev/null 2>&1; printf '{"answer":"direct exit %s"}' $?`
	if status, out = chat(direct, nil); status != 200 || !strings.Contains(out, "direct exit 7") {
		t.Fatalf("direct connection: %d %s", status, out)
	}
	resp, err = http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var m bytes.Buffer
	m.ReadFrom(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`codellm_egress_connections_total{decision="allowed",reason="allowed"} 1`,
		`codellm_egress_connections_total{decision="refused",reason="not_allowed"} 1`} {
		if !strings.Contains(m.String(), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if !strings.Contains(logs.String(), "egress allowed") || !strings.Contains(logs.String(), "run=codellm-") {
		t.Errorf("decisions not logged with the run id:\n%s", logs.String())
	}
}
