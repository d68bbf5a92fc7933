package openai

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzDecodeChatRequest checks that any body yields either a 400 with a stable code or a request whose
// derived views are consistent: sources are system/user messages other than the bag, in order, and a
// bag, when accepted, is valid JSON. Plain `go test` runs the testdata requests as seeds.
func FuzzDecodeChatRequest(f *testing.F) {
	files, _ := filepath.Glob("testdata/requests/*.json")
	for _, file := range files {
		if b, err := os.ReadFile(file); err == nil {
			f.Add(b)
		}
	}
	codes := map[string]bool{"invalid_json": true, "invalid_messages": true, "invalid_metadata": true}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, e := DecodeChatRequest(body)
		if e != nil {
			if r != nil || e.Status != 400 || !codes[e.Code] || e.Message == "" {
				t.Fatalf("bad error %+v with request %v", e, r)
			}
			return
		}
		if len(r.Messages) == 0 || r.TimeoutSeconds < 0 || r.TimeoutSeconds > MaxTimeoutSeconds || (r.Tools != nil && len(r.Tools) == 0 && !strings.Contains(string(body), "tools")) {
			t.Fatalf("inconsistent request %+v", r)
		}
		prev := -1
		for _, s := range r.Sources() {
			m := r.Messages[s.Message]
			if s.Message <= prev || !scanned(m.Role) || m.Name == BagName || m.Text != s.Text {
				t.Fatalf("bad source %+v for message %+v", s, m)
			}
			prev = s.Message
		}
		bag, be := r.Bag()
		if be != nil {
			if bag != nil || be.Status != 400 || be.Code != "invalid_fleet_input" {
				t.Fatalf("bad bag error %+v", be)
			}
		} else if bag != nil && !json.Valid(bag) {
			t.Fatalf("invalid bag accepted: %q", bag)
		}
		_ = r.Guarded()
	})
}
