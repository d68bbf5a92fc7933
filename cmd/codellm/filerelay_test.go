package main

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/filerelay"
)

// `codellm worker relay` refuses to start without its upstream and token, or with a plaintext remote
// upstream, naming the Code API's variable.
func TestWorkerRelayRefusesBadSettings(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{nil, "LIBRECHAT_CODE_FILE_RELAY_UPSTREAM) is required"},
		{map[string]string{"LIBRECHAT_CODE_FILE_RELAY_UPSTREAM": "https://code.example/egress"}, "LIBRECHAT_CODE_FILE_RELAY_TOKEN) is required"},
		{map[string]string{"LIBRECHAT_CODE_FILE_RELAY_UPSTREAM": "http://code.example/egress", "LIBRECHAT_CODE_FILE_RELAY_TOKEN": "t"}, "must use HTTPS"},
		{map[string]string{"LIBRECHAT_CODE_FILE_RELAY_UPSTREAM": "https://code.example/egress", "LIBRECHAT_CODE_FILE_RELAY_TOKEN": "t",
			"LIBRECHAT_CODE_FILE_RELAY_TIMEOUT_MS": "0"}, "LIBRECHAT_CODE_FILE_RELAY_TIMEOUT_MS"},
	} {
		for k, v := range tc.env {
			t.Setenv(k, v)
		}
		var stderr bytes.Buffer
		code := cmdWorker([]string{"relay"}, &bytes.Buffer{}, &stderr)
		if code == 0 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("env %v: exit %d, stderr %q; want %q", tc.env, code, stderr.String(), tc.want)
		}
	}
}

// The worker's in-process relay: on only with both the upstream and the manifest key, and then serving
// the relay (its health with the token it handed the runner) until stopped.
func TestWorkerInProcessRelay(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if _, _, err := (&relayFlags{manifestKey: "x"}).fileEgress(log); err == nil || !strings.Contains(err.Error(), "needs --file-relay-upstream") {
		t.Fatalf("key alone: %v", err)
	}
	if _, _, err := (&relayFlags{upstream: "https://code.example/egress"}).fileEgress(log); err == nil ||
		!strings.Contains(err.Error(), "LIBRECHAT_CODE_EXECUTION_MANIFEST_PUBLIC_KEY) is required") {
		t.Fatalf("upstream alone: %v", err)
	}
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	der, _ := x509.MarshalPKIXPublicKey(pub)
	f := &relayFlags{upstream: "https://code.example/egress", manifestKey: base64.StdEncoding.EncodeToString(der),
		maxBytes: 1 << 20, timeoutMS: 1000, maxConcurrent: 2}
	fe, stop, err := f.fileEgress(log)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if !fe.Key.Equal(pub) || len(fe.Token) != 64 || fe.Timeout != time.Second {
		t.Fatalf("FileEgress = %+v", fe)
	}
	c := &http.Client{Transport: &http.Transport{}}
	defer c.CloseIdleConnections()
	for tok, want := range map[string]int{fe.Token: 200, "guess": 401} {
		req, _ := http.NewRequest(http.MethodGet, fe.RelayURL+"/health", nil)
		req.Header.Set(filerelay.TokenHeader, tok)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("health with token %q: %d, want %d", tok, resp.StatusCode, want)
		}
	}
}

// The relay settings answer to the Code API worker's variable names.
func TestWorkerRelaySettingsSpellings(t *testing.T) {
	t.Setenv("LIBRECHAT_CODE_FILE_RELAY_UPSTREAM", "https://code.example/egress")
	t.Setenv("LIBRECHAT_CODE_EXECUTION_MANIFEST_PUBLIC_KEY", "k")
	t.Setenv("LIBRECHAT_CODE_FILE_RELAY_MAX_BYTES", "1048576")
	t.Setenv("LIBRECHAT_CODE_FILE_RELAY_TIMEOUT_MS", "1500")
	t.Setenv("LIBRECHAT_CODE_FILE_RELAY_MAX_CONCURRENT_REQUESTS", "3")
	var stderr bytes.Buffer
	fs := newFlagSet("worker run", "worker run", &stderr)
	var f workerFlags
	f.register(fs, true)
	if _, code := parseInterspersed(fs, nil, &stderr); code >= 0 {
		t.Fatalf("parse: %d %s", code, stderr.String())
	}
	r := f.relay
	if r.upstream != "https://code.example/egress" || r.manifestKey != "k" || r.maxBytes != 1<<20 || r.timeoutMS != 1500 || r.maxConcurrent != 3 {
		t.Fatalf("relay flags = %+v", r)
	}
}
