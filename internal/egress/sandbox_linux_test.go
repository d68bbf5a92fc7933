//go:build linux

package egress

import (
	"archive/zip"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/sandbox"
)

// world is what the sandbox end-to-end tests talk to: an HTTP and an HTTPS
// server on 127.0.0.1 (and the same HTTP server on 127.0.0.2, to show that
// a raw IP is refused although it is reachable), names mapped to them in
// the proxy's resolver only, and a sandbox whose egress is that proxy.
type world struct {
	sb        *sandbox.Sandbox
	httpPort  string
	httpsPort string
	rawIPURL  string
	caPEM     []byte
	metrics   *countMetrics
	logs      *bytes.Buffer
}

func requireSandbox(t *testing.T) {
	if os.Getenv("CODELLM_REQUIRE_SANDBOX") == "1" {
		return
	}
	rep := sandbox.Probe(sandbox.Config{})
	if !rep.Ready {
		t.Skipf("native sandbox unavailable here: %v", rep.Missing)
	}
}

func newWorld(t *testing.T, list []string) *world {
	t.Helper()
	requireSandbox(t)
	w := &world{metrics: &countMetrics{conns: map[string]int{}}}
	cert, caPEM := testCert(t)
	w.caPEM = caPEM
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(rw http.ResponseWriter, r *http.Request) { fmt.Fprintf(rw, "ok from %s", r.Host) })
	mux.HandleFunc("/simple/demo/", func(rw http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(rw, `<!DOCTYPE html><html><body><a href="/files/demo-1.0-py3-none-any.whl">demo-1.0-py3-none-any.whl</a></body></html>`)
	})
	wheel := demoWheel(t)
	mux.HandleFunc("/files/demo-1.0-py3-none-any.whl", func(rw http.ResponseWriter, _ *http.Request) { _, _ = rw.Write(wheel) })
	serve := func(addr string, tlsOn bool) string {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		if tlsOn {
			l = tls.NewListener(l, &tls.Config{Certificates: []tls.Certificate{cert}})
		}
		go func() { _ = srv.Serve(l) }()
		t.Cleanup(func() { _ = srv.Close() })
		return l.Addr().String()
	}
	h := serve("127.0.0.1:0", false)
	w.httpPort = h[strings.LastIndex(h, ":")+1:]
	s := serve("127.0.0.1:0", true)
	w.httpsPort = s[strings.LastIndex(s, ":")+1:]
	w.rawIPURL = "http://" + serve("127.0.0.2:0", false) + "/ok"

	pol, err := Parse(list)
	if err != nil {
		t.Fatal(err)
	}
	w.logs = &bytes.Buffer{}
	p, err := New(Config{Policy: pol, Metrics: w.metrics, Logger: slogTo(w.logs), Resolver: mapResolver{
		"allowed.test": lo, "pypi.test": lo, "denied.test": lo,
		"private.test": {netip.MustParseAddr("10.255.255.1")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	w.sb, err = sandbox.New(sandbox.Config{Mode: sandbox.ModeNative, Egress: func(id string, n []string) (sandbox.EgressRun, error) {
		s, err := p.Open(id, n)
		if err != nil {
			return nil, err
		}
		return s, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.sb.Close() })
	return w
}

// run executes script with bash in a fresh sandboxed block of its own run
// and returns its exit code and combined output.
func (w *world) run(t *testing.T, script string) (int, string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ca.pem"), w.caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	r, err := w.sb.NewRun(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir, "LANG=C.UTF-8", "HP=" + w.httpPort, "SP=" + w.httpsPort,
		"RAWIP_URL=" + w.rawIPURL, "PIP_DISABLE_PIP_VERSION_CHECK=1", "PIP_NO_CACHE_DIR=1", "PIP_NO_INPUT=1"}
	p, err := r.Start(sandbox.Spec{Path: "/bin/bash", Args: []string{"bash", "-c", script}, Env: env, Dir: dir, Stdout: out, Stderr: out})
	if err != nil {
		t.Fatal(err)
	}
	res := p.Wait()
	b, _ := os.ReadFile(out.Name())
	return res.ExitCode, string(b)
}

func need(t *testing.T, prog string) {
	if _, err := exec.LookPath(prog); err != nil {
		if os.Getenv("CODELLM_REQUIRE_SANDBOX") == "1" {
			t.Fatalf("%s is not installed (.ci/run installs it)", prog)
		}
		t.Skipf("%s is not installed", prog)
	}
}

var testList = []string{"allowed.test", "pypi.test", "private.test", "127.0.0.1"}

func TestSandboxCurl(t *testing.T) {
	need(t, "curl")
	w := newWorld(t, testList)
	// Reachable from the host directly: what a block must not be able to do by itself.
	if resp, err := http.Get(w.rawIPURL); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}
	code, out := w.run(t, `set -u
curl -sS --cacert ca.pem "https://allowed.test:$SP/ok"; echo " [https]"
curl -sS "http://allowed.test:$HP/ok"; echo " [http]"
curl -sS --cacert ca.pem --proxy "$ALL_PROXY" "https://allowed.test:$SP/ok"; echo " [socks5h]"
curl -sS --cacert ca.pem "https://denied.test:$SP/ok"; echo " [denied exit $?]"
curl -sS "$RAWIP_URL"; echo " [rawip exit $?]"
curl -sS --cacert ca.pem "https://private.test:$SP/ok"; echo " [private exit $?]"
curl -sS --noproxy '*' --cacert ca.pem "https://allowed.test:$SP/ok"; echo " [direct-name exit $?]"
curl -sS --noproxy '*' "http://127.0.0.1:$HP/ok"; echo " [direct-ip exit $?]"
`)
	if code != 0 {
		t.Fatalf("script exit %d:\n%s", code, out)
	}
	for _, want := range []string{
		"ok from allowed.test:" + w.httpsPort + " [https]",
		"ok from allowed.test:" + w.httpPort + " [http]",
		"ok from allowed.test:" + w.httpsPort + " [socks5h]",
		"CONNECT tunnel failed, response 403", "[denied exit 56]",
		"raw IP destination 127.0.0.2 is not allowed", "[rawip exit 0]", // curl prints the proxy's 403 body and exits 0
		"[private exit 56]",
		"Could not resolve host: allowed.test", "[direct-name exit 6]",
		"[direct-ip exit 7]",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	for _, k := range []string{"allowed/allowed", "refused/not_allowed", "refused/raw_ip", "refused/private_address"} {
		if w.metrics.get(k) == 0 {
			t.Errorf("no %s decision counted: %v", k, w.metrics.conns)
		}
	}
	if !strings.Contains(w.logs.String(), "run=codellm-") {
		t.Errorf("decisions are not logged with the run id:\n%s", w.logs)
	}
}

func TestSandboxPythonUDPAndDNS(t *testing.T) {
	need(t, "python3")
	w := newWorld(t, testList)
	code, out := w.run(t, `python3 - <<'EOF'
import os, socket, ssl, urllib.request, urllib.error
ctx = ssl.create_default_context(cafile="ca.pem")
sp, hp = os.environ["SP"], os.environ["HP"]
print(urllib.request.urlopen("https://allowed.test:%s/ok" % sp, context=ctx).read().decode(), "[urllib https]")
print(urllib.request.urlopen("http://allowed.test:%s/ok" % hp).read().decode(), "[urllib http]")
for url in ("https://denied.test:%s/ok" % sp, "https://private.test:%s/ok" % sp):
    try:
        urllib.request.urlopen(url, context=ctx)
        print("REACHED", url)
    except (urllib.error.URLError, OSError) as e:
        print("refused", url, type(e).__name__)
try:
    socket.getaddrinfo("allowed.test", 443)
    print("RESOLVED")
except OSError as e:
    print("no dns", type(e).__name__)
for dst in (("10.0.0.1", 53), ("127.0.0.53", 53)):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(1)
    try:
        s.sendto(b"\x00", dst)
        s.recvfrom(1)
        print("UDP ANSWERED", dst)
    except OSError as e:
        print("udp failed", dst[0], type(e).__name__)
EOF`)
	if code != 0 {
		t.Fatalf("script exit %d:\n%s", code, out)
	}
	for _, want := range []string{"ok from allowed.test:" + w.httpsPort + " [urllib https]", "[urllib http]",
		"refused https://denied.test", "refused https://private.test", "no dns gaierror",
		"udp failed 10.0.0.1", "udp failed 127.0.0.53"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	for _, bad := range []string{"REACHED", "RESOLVED", "UDP ANSWERED"} {
		if strings.Contains(out, bad) {
			t.Errorf("%s in:\n%s", bad, out)
		}
	}
}

func TestSandboxNode(t *testing.T) {
	need(t, "node")
	w := newWorld(t, testList)
	code, out := w.run(t, `node - <<'EOF'
const http = require('http'), tls = require('tls'), fs = require('fs');
const sp = process.env.SP, proxy = new URL(process.env.HTTPS_PROXY);
function viaConnect(host) {
  return new Promise((resolve) => {
    const req = http.request({host: proxy.hostname, port: proxy.port, method: 'CONNECT', path: host + ':' + sp});
    req.on('connect', (res, sock) => {
      if (res.statusCode !== 200) { sock.destroy(); return resolve('refused ' + host + ' ' + res.statusCode); }
      const t = tls.connect({socket: sock, servername: host, ca: fs.readFileSync('ca.pem')}, () =>
        t.write('GET /ok HTTP/1.1\r\nHost: ' + host + '\r\nConnection: close\r\n\r\n'));
      let body = ''; t.on('data', d => body += d); t.on('end', () => resolve(body.split('\r\n\r\n')[1]));
    });
    req.on('error', e => resolve('error ' + e.message));
    req.end();
  });
}
(async () => {
  console.log(await viaConnect('allowed.test'), '[node connect]');
  console.log(await viaConnect('denied.test'), '[node connect denied]');
  // fetch honours the proxy variables only from Node 22.21/24 (NODE_USE_ENV_PROXY, set by codellm);
  // older versions try to resolve the name themselves and find no resolver: no DNS leaves the sandbox.
  process.env.NODE_EXTRA_CA_CERTS = 'ca.pem';
  try { const r = await fetch('https://denied.test:' + sp + '/ok'); console.log('FETCHED denied', r.status); }
  catch (e) { console.log('fetch denied failed'); }
  try { const r = await fetch('http://allowed.test:' + process.env.HP + '/ok'); console.log('fetch allowed', r.status, await r.text()); }
  catch (e) { console.log('fetch allowed failed', e.cause && e.cause.code); }
})();
EOF`)
	if code != 0 {
		t.Fatalf("script exit %d:\n%s", code, out)
	}
	for _, want := range []string{"ok from allowed.test [node connect]", "refused denied.test 403 [node connect denied]", "fetch denied failed"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "FETCHED denied") {
		t.Errorf("fetch reached a denied name:\n%s", out)
	}
	t.Logf("node %s:\n%s", nodeVersion(), out)
}

// Plain fetch through the proxy on a Node whose fetch ignores HTTP(S)_PROXY (20 here): the sandbox's
// NODE_OPTIONS preload tunnels it. Differential: the same script without the preload (NODE_OPTIONS
// emptied) reaches nothing. The preload widens nothing: a denied name and a raw IP are refused by the
// proxy, and with the proxy variables removed fetch has no way out at all.
func TestSandboxNodeFetch(t *testing.T) {
	need(t, "node")
	w := newWorld(t, testList)
	script := `cat > f.js <<'JS'
const url = process.argv[2];
fetch(url).then(async r => console.log('fetched', url, r.status, await r.text()),
  e => console.log('failed', url, String(e.cause && (e.cause.message || e.cause.code) || e.message)));
JS
export NODE_EXTRA_CA_CERTS=ca.pem
node f.js "https://allowed.test:$SP/ok"
node f.js "http://allowed.test:$HP/ok"
node f.js "https://denied.test:$SP/ok"
node f.js "$RAWIP_URL"
HTTPS_PROXY= https_proxy= node f.js "https://allowed.test:$SP/ok"
NODE_OPTIONS= node f.js "https://allowed.test:$SP/ok"
`
	code, out := w.run(t, script)
	if code != 0 {
		t.Fatalf("script exit %d:\n%s", code, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := []string{
		"fetched https://allowed.test:" + w.httpsPort + "/ok 200 ok from allowed.test:" + w.httpsPort,
		"fetched http://allowed.test:" + w.httpPort + "/ok 200 ok from allowed.test:" + w.httpPort,
		"failed https://denied.test:" + w.httpsPort + "/ok egress proxy refused denied.test:" + w.httpsPort + ": HTTP/1.1 403",
		"failed " + w.rawIPURL + " egress proxy refused 127.0.0.2:",
		"failed https://allowed.test:" + w.httpsPort + "/ok", // no proxy variable: the namespace has no route
		"failed https://allowed.test:" + w.httpsPort + "/ok", // no preload: Node 20's fetch resolves the name itself
	}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d (node %s):\n%s", len(lines), len(want), nodeVersion(), out)
	}
	for i, wnt := range want {
		if !strings.HasPrefix(lines[i], wnt) {
			t.Errorf("line %d: %q, want prefix %q", i+1, lines[i], wnt)
		}
	}
	if got := w.metrics.get("allowed/allowed"); got != 2 {
		t.Errorf("allowed connections %d: %v", got, w.metrics.conns)
	}
	t.Logf("node %s:\n%s", nodeVersion(), out)
}

func nodeVersion() string {
	b, _ := exec.Command("node", "--version").Output()
	return strings.TrimSpace(string(b))
}

func TestSandboxPip(t *testing.T) {
	need(t, "python3")
	if err := exec.Command("python3", "-m", "pip", "--version").Run(); err != nil {
		if os.Getenv("CODELLM_REQUIRE_SANDBOX") == "1" {
			t.Fatal("python3 -m pip is not available (.ci/run installs python3-pip)")
		}
		t.Skip("pip is not installed")
	}
	w := newWorld(t, testList)
	code, out := w.run(t, `set -u
/usr/bin/python3 -m pip download -q --no-deps --cert ca.pem -d dl --index-url "https://pypi.test:$SP/simple/" demo && ls dl; echo "[allowed exit $?]"
/usr/bin/python3 -m pip download -q --no-deps --cert ca.pem -d dl2 --retries 0 --timeout 5 --index-url "https://denied.test:$SP/simple/" demo 2>&1 | tail -2; ls dl2 2>/dev/null; echo "[denied done]"
`)
	if code != 0 {
		t.Fatalf("script exit %d:\n%s", code, out)
	}
	if !strings.Contains(out, "demo-1.0-py3-none-any.whl\n[allowed exit 0]") {
		t.Errorf("pip download from the allowed index failed:\n%s", out)
	}
	if strings.Count(out, "demo-1.0-py3-none-any.whl") != 1 || !strings.Contains(out, "[denied done]") {
		t.Errorf("pip download from a denied index got something:\n%s", out)
	}
	if w.metrics.get("refused/not_allowed") == 0 {
		t.Errorf("the denied index was not refused by the proxy: %v", w.metrics.conns)
	}
}

// TestSandboxNarrowed runs with a per-run list narrower than the operator's.
func TestSandboxNarrowed(t *testing.T) {
	need(t, "curl")
	w := newWorld(t, testList)
	if _, err := w.sb.NewRun(&sandbox.Limits{NetworkAllow: &[]string{"evil.test"}}); err == nil {
		t.Fatal("a per-run list wider than the operator's was accepted")
	}
	only := []string{"pypi.test", "127.0.0.1"}
	r, err := w.sb.NewRun(&sandbox.Limits{NetworkAllow: &only})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	dir := t.TempDir()
	out, _ := os.Create(filepath.Join(t.TempDir(), "o"))
	defer out.Close()
	p, err := r.Start(sandbox.Spec{Path: "/bin/bash", Args: []string{"bash", "-c",
		`curl -sS "http://pypi.test:` + w.httpPort + `/ok"; echo; curl -sS "http://allowed.test:` + w.httpPort + `/ok"`},
		Env: []string{"PATH=/usr/bin:/bin"}, Dir: dir, Stdout: out, Stderr: out})
	if err != nil {
		t.Fatal(err)
	}
	p.Wait()
	b, _ := os.ReadFile(out.Name())
	if !strings.Contains(string(b), "ok from pypi.test") || !strings.Contains(string(b), "allowed.test is not on the network allow-list") {
		t.Fatalf("narrowed run:\n%s", b)
	}
}

func testCert(t *testing.T) (tls.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "codellm egress test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames:    []string{"allowed.test", "pypi.test", "denied.test", "private.test"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// demoWheel is a minimal valid wheel of a package "demo" 1.0.
func demoWheel(t *testing.T) []byte {
	var b bytes.Buffer
	z := zip.NewWriter(&b)
	for name, body := range map[string]string{
		"demo/__init__.py":            "",
		"demo-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n",
		"demo-1.0.dist-info/WHEEL":    "Wheel-Version: 1.0\nGenerator: codellm-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
		"demo-1.0.dist-info/RECORD":   "",
	} {
		f, err := z.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = f.Write([]byte(body))
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// Every block's listener, socket pair and namespace reference is released with its run: the process's
// descriptor count is the same after many egress runs as before them.
func TestSandboxEgressReleasesDescriptors(t *testing.T) {
	need(t, "curl")
	w := newWorld(t, testList)
	count := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	w.run(t, `curl -sS "http://allowed.test:$HP/ok"`) // warm up lazily opened descriptors
	before := count()
	for range 5 {
		if code, out := w.run(t, `curl -sS "http://allowed.test:$HP/ok"`); code != 0 || !strings.Contains(out, "ok from") {
			t.Fatalf("run: %d %s", code, out)
		}
	}
	if after := count(); after > before {
		t.Fatalf("%d descriptors before the runs, %d after", before, after)
	}
}
