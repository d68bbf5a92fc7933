package bridge

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf16"
)

// The request a worker builds verifies on the receiving side over the path
// as it arrives on the request line, with ':' escaped as %3A.
func TestNewSignedRequestVerifies(t *testing.T) {
	pub, priv, _ := GenerateKey()
	body, _ := Marshal(LeaseRequest{ProtocolVersion: 1, IncarnationID: "AAECAwQFBgcICQoLDA0ODxAR"})
	got := make(chan bool, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		p, ok := ProofFromHeaders(r.Header)
		c, _ := Canonicalize(b)
		got <- ok && RequestPath(r) == "/v1/bridge/workers/my%3Avm/lease" &&
			Verify(pub, SigningString(r.Method, RequestPath(r), p.Timestamp, p.Nonce, c, p.Credential), p.Signature)
	}))
	defer srv.Close()
	req, err := NewSignedRequest(context.Background(), srv.URL+"/v1/", PathLease("my:vm"), body, "cred", priv, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if !<-got {
		t.Fatal("signed request did not verify at the receiver")
	}
}

func TestTruncateError(t *testing.T) {
	short := "fine"
	if TruncateError(short) != short {
		t.Fatal("short string changed")
	}
	// 4095 ASCII units then an astral char (2 units): the pair must not split.
	s := strings.Repeat("a", 4095) + "\U0001F600" + "tail"
	got := TruncateError(s)
	if got != strings.Repeat("a", 4095) {
		t.Fatalf("len %d", len(got))
	}
	s = strings.Repeat("é", 5000)
	if n := len(utf16.Encode([]rune(TruncateError(s)))); n != MaxSettlementError {
		t.Fatalf("units %d", n)
	}
}
