package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// The runner's /api/v2/connect through a real serve: the upgrade passes the listener's rules (Host,
// authentication) and the connection is hijacked from the server's own writers; the key is required.
func TestConnectThroughServe(t *testing.T) {
	requireNative(t)
	addr := freeAddr(t)
	const key = "0123456789abcdef0123456789abcdef-connect"
	s := serveWith(t, addr, []string{"CODELLM_API_KEY=" + key}, "serve", "--listen", addr)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := "ws" + strings.TrimPrefix(s.base, "http") + "/api/v2/connect"
	if _, resp, err := websocket.Dial(ctx, url, nil); err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("without the key: %v %v", resp, err)
	}
	c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + key}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	c.Write(ctx, websocket.MessageText, []byte(`{"type":"init","language":"bash","version":"*","files":[{"content":"read x; echo got $x"}]}`))
	c.Write(ctx, websocket.MessageText, []byte(`{"type":"data","stream":"stdin","data":"it\n"}`))
	var out []string
	for {
		_, b, err := c.Read(ctx)
		if err != nil {
			if websocket.CloseStatus(err) != 4999 {
				t.Fatalf("closed with %v after %v", err, out)
			}
			break
		}
		var m map[string]any
		json.Unmarshal(b, &m)
		out = append(out, string(b))
		if m["type"] == "data" && m["data"] != "got it\n" {
			t.Fatalf("data %v", m)
		}
	}
	if all := strings.Join(out, "\n"); !strings.Contains(all, `"got it\n"`) || !strings.Contains(all, `"type":"exit","stage":"run","code":0,"signal":null`) {
		t.Fatalf("messages:\n%s", all)
	}
}
