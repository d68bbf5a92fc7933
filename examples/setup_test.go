package examples

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// builtDir holds the codellm binary bin built; TestMain removes it.
var builtDir string

// bin builds codellm once (static, as `make build` does) and returns the directory holding it.
var bin = func() func(t *testing.T) string {
	var once sync.Once
	var err error
	return func(t *testing.T) string {
		t.Helper()
		once.Do(func() {
			if builtDir, err = os.MkdirTemp("", "codellm-examples-"); err != nil {
				return
			}
			cmd := exec.Command("go", "build", "-o", filepath.Join(builtDir, "codellm"), "../cmd/codellm")
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, e := cmd.CombinedOutput(); e != nil {
				err = fmt.Errorf("go build: %v\n%s", e, out)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		return builtDir
	}
}()

func TestMain(m *testing.M) {
	code := m.Run()
	if builtDir != "" {
		os.RemoveAll(builtDir)
	}
	os.Exit(code)
}

// documentEnv is what a document tells its reader to have set or made before its commands: the LibreChat
// guide's hub runs with TLS (a certificate hub.crt/hub.key in the working directory, trusted through
// SSL_CERT_FILE) and its admin commands read the hub's URL from CODELLM_HUB_URL.
func documentEnv(t *testing.T, s *session, doc string) []string {
	if doc != "docs/librechat.md" {
		return []string{"CODELLM_HUB_URL=http://127.0.0.1:" + s.port["8090"] + "/v1"}
	}
	writeCert(t, filepath.Join(s.dir, "hub.crt"), filepath.Join(s.dir, "hub.key"))
	return []string{"CODELLM_HUB_URL=https://127.0.0.1:" + s.port["8090"] + "/v1", "SSL_CERT_FILE=" + filepath.Join(s.dir, "hub.crt")}
}

// writeCert writes a self-signed certificate for 127.0.0.1 and localhost and its key.
func writeCert(t *testing.T, certFile, keyFile string) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "hub"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	must(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	must(t, err)
	must(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644))
	must(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600))
}
