package listen

import (
	"strings"
	"testing"
)

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080":       true,
		"127.1.2.3:1":          true,
		"[::1]:8080":           true,
		"localhost:80":         true,
		"LOCALHOST:80":         true,
		":8080":                false,
		"0.0.0.0:8080":         false,
		"[::]:8080":            false,
		"192.168.1.2:80":       false,
		"example.com:80":       false,
		"localhost.evil:80":    false,
		"127.0.0.1":            false, // no port
		"[::ffff:127.0.0.1]:1": true,
	} {
		if got := IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

func TestCheckPublic(t *testing.T) {
	if err := CheckPublic("0.0.0.0:0", false, false); err == nil {
		t.Fatal("public address without auth accepted")
	} else {
		for _, word := range []string{"--api-key", "--client-ca", "--insecure-public"} {
			if !strings.Contains(err.Error(), word) {
				t.Errorf("error %q does not name %s", err, word)
			}
		}
	}
	if err := CheckPublic("0.0.0.0:0", true, false); err != nil {
		t.Fatalf("with auth: %v", err)
	}
	if err := CheckPublic("0.0.0.0:0", false, true); err != nil {
		t.Fatalf("with --insecure-public: %v", err)
	}
	if err := CheckPublic("127.0.0.1:0", false, false); err != nil {
		t.Fatalf("loopback: %v", err)
	}
}
