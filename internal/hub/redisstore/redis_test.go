package redisstore_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisURL is the server every test in this package shares: started by
// TestMain (or taken from CODELLM_TEST_REDIS_URL); "" when unavailable.
var (
	redisURL  string
	redisSkip string
	prefixSeq atomic.Int64
)

// startRedis starts redis-server on a free loopback port with a throwaway
// directory and no persistence. The returned stop kills and reaps it.
func startRedis() (url string, stop func(), err error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", nil, fmt.Errorf("redis-server not found (apt-get install -y redis-server): %w", err)
	}
	dir, err := os.MkdirTemp("", "codellm-redis-")
	if err != nil {
		return "", nil, err
	}
	for attempt := 0; attempt < 5; attempt++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			_ = os.RemoveAll(dir)
			return "", nil, err
		}
		port := ln.Addr().(*net.TCPAddr).Port
		_ = ln.Close()
		cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--dir", dir, "--maxmemory-policy", "noeviction")
		cmd.Stdout, cmd.Stderr = nil, nil
		if err := cmd.Start(); err != nil {
			_ = os.RemoveAll(dir)
			return "", nil, err
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		stop := func() {
			_ = cmd.Process.Kill()
			<-exited
			_ = os.RemoveAll(dir)
		}
		url := fmt.Sprintf("redis://127.0.0.1:%d/0", port)
		opt, _ := redis.ParseURL(url)
		c := redis.NewClient(opt)
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			select {
			case <-exited:
				deadline = time.Time{} // port taken meanwhile: try another
				continue
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			err := c.Ping(ctx).Err()
			cancel()
			if err == nil {
				_ = c.Close()
				return url, stop, nil
			}
			time.Sleep(20 * time.Millisecond)
		}
		_ = c.Close()
		stop()
		dir, _ = os.MkdirTemp("", "codellm-redis-")
	}
	return "", nil, fmt.Errorf("redis-server did not come up")
}

// needRedis skips (or, when CI demands it, fails) without a server.
func needRedis(t testing.TB) string {
	t.Helper()
	if redisURL == "" {
		if os.Getenv("CODELLM_REQUIRE_SANDBOX") == "1" || os.Getenv("CODELLM_REQUIRE_REDIS") == "1" {
			t.Fatalf("redis required: %s", redisSkip)
		}
		t.Skipf("no redis: %s", redisSkip)
	}
	return redisURL
}

// freshPrefix isolates one store's keys on the shared server.
func freshPrefix() string {
	return fmt.Sprintf("test:%d:%d:", os.Getpid(), prefixSeq.Add(1))
}
