package server_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/server"
)

type testPKI struct {
	caPEM, serverCert, serverKey string // file paths
	pool                         *x509.CertPool
	client                       tls.Certificate // signed by the CA
	stranger                     tls.Certificate // self-signed, not by the CA
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	caKey := key()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	issue := func(serial int64, cn string, usage x509.ExtKeyUsage, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (tls.Certificate, []byte, []byte) {
		k := key()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
		if parent == nil {
			parent, parentKey = tmpl, k
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &k.PublicKey, parentKey)
		if err != nil {
			t.Fatal(err)
		}
		kb, _ := x509.MarshalECPrivateKey(k)
		certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
		keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
		c, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return c, certPEM, keyPEM
	}
	p := testPKI{pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	_, sc, sk := issue(2, "127.0.0.1", x509.ExtKeyUsageServerAuth, ca, caKey)
	p.client, _, _ = issue(3, "fleet", x509.ExtKeyUsageClientAuth, ca, caKey)
	p.stranger, _, _ = issue(4, "stranger", x509.ExtKeyUsageClientAuth, nil, nil)
	write := func(name string, b []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	p.caPEM = write("ca.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}))
	p.serverCert = write("server.pem", sc)
	p.serverKey = write("server.key", sk)
	return p
}

// --tls-cert/--tls-key serve HTTPS; --client-ca requires a client certificate signed by that CA, and with
// an API key both must pass. A public listener with mTLS alone is allowed (§1.2).
func TestMutualTLS(t *testing.T) {
	pki := newTestPKI(t)
	ts := startServer(t, options{cfg: func(c *server.Config) {
		c.TLSCert, c.TLSKey, c.ClientCA = pki.serverCert, pki.serverKey, pki.caPEM
		c.APIKey = "k"
	}})
	url := strings.Replace(ts.URL, "http://", "https://", 1) + "/v1/models"
	client := func(certs ...tls.Certificate) *http.Client {
		return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
			RootCAs: pki.pool, Certificates: certs}}}
	}
	get := func(c *http.Client, key string) (int, error) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := c.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	good := client(pki.client)
	defer good.CloseIdleConnections()
	if status, err := get(good, "k"); err != nil || status != 200 {
		t.Fatalf("client cert + key: %d %v", status, err)
	}
	if status, err := get(good, ""); err != nil || status != 401 {
		t.Fatalf("client cert without key: %d %v (want 401: both must pass)", status, err)
	}
	for name, c := range map[string]*http.Client{"no client cert": client(), "cert from another CA": client(pki.stranger)} {
		if status, err := get(c, "k"); err == nil {
			t.Fatalf("%s: got %d, want a TLS handshake failure", name, status)
		}
		c.CloseIdleConnections()
	}
	// Plain HTTP to a TLS listener fails.
	if resp, err := http.Get(ts.URL + "/healthz"); err == nil {
		body := make([]byte, 64)
		n, _ := resp.Body.Read(body)
		resp.Body.Close()
		if resp.StatusCode == 200 && string(body[:n]) == "ok" {
			t.Fatal("plain HTTP served on the TLS listener")
		}
	}
	// mTLS alone protects a public listener.
	if _, err := server.New(server.Config{Listen: "0.0.0.0:0", TLSCert: pki.serverCert, TLSKey: pki.serverKey, ClientCA: pki.caPEM},
		ts.srv.Engine().Config(), nil); err != nil {
		t.Fatalf("public listener with mTLS refused: %v", err)
	}
	if _, err := server.New(server.Config{Listen: "127.0.0.1:0", ClientCA: pki.caPEM}, ts.srv.Engine().Config(), nil); err == nil {
		t.Fatal("--client-ca without a TLS certificate accepted")
	}
}
