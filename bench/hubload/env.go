package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisServer is a redis-server this run started (or one it was given).
type redisServer struct {
	url    string
	cmd    *exec.Cmd
	dir    string
	client *redis.Client
}

// startRedis starts redis-server on a free loopback port, without persistence (the hub's cost is measured,
// not the disk's), with noeviction as the hub requires.
func startRedis(url string) (*redisServer, error) {
	r := &redisServer{url: url}
	if url == "" {
		bin, err := exec.LookPath("redis-server")
		if err != nil {
			return nil, fmt.Errorf("redis-server not found (apt-get install redis-server, or pass --redis URL): %w", err)
		}
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		if r.dir, err = os.MkdirTemp("", "hubload-redis-"); err != nil {
			return nil, err
		}
		r.url = fmt.Sprintf("redis://127.0.0.1:%d/0", port)
		r.cmd = exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--dir", r.dir, "--maxmemory-policy", "noeviction", "--maxclients", "20000")
		if err := r.cmd.Start(); err != nil {
			return nil, err
		}
	}
	opt, err := redis.ParseURL(r.url)
	if err != nil {
		r.stop()
		return nil, err
	}
	r.client = redis.NewClient(opt)
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if err := r.client.Ping(context.Background()).Err(); err == nil {
			return r, nil
		} else if time.Now().After(end) {
			r.stop()
			return nil, fmt.Errorf("redis at %s: %w", r.url, err)
		}
	}
}

// flush empties the database between configurations.
func (r *redisServer) flush() error { return r.client.FlushDB(context.Background()).Err() }

// commands is the server's total_commands_processed.
func (r *redisServer) commands() (int64, error) {
	info, err := r.client.Info(context.Background(), "stats").Result()
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "total_commands_processed:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("no total_commands_processed in INFO stats")
}

func (r *redisServer) stop() {
	if r.client != nil {
		_ = r.client.Close()
	}
	if r.cmd != nil && r.cmd.Process != nil {
		_ = r.cmd.Process.Kill()
		_ = r.cmd.Wait()
	}
	if r.dir != "" {
		_ = os.RemoveAll(r.dir)
	}
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// hubProc is one `codellm hub serve` process.
type hubProc struct {
	cmd  *exec.Cmd
	root string // http://addr
	done chan struct{}
}

// startHub starts a replica on store (redis://… or a bbolt path).
func startHub(bin, store string, env []string) (*hubProc, error) {
	cmd := exec.Command(bin, "hub", "serve", "--listen", "127.0.0.1:0", "--admin-token", adminToken, "--api-key", apiKey, "--store", store)
	// One API key sends the whole load: the per-caller rate limits would measure themselves.
	cmd.Env = append(append(os.Environ(), "HOME="+os.TempDir(), "CODELLM_HUB_RATE_LIMITS=off"), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &hubProc{cmd: cmd, done: make(chan struct{})}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if _, a, ok := strings.Cut(sc.Text(), "listening on "); ok {
				select {
				case addr <- strings.TrimSpace(a):
				default:
				}
			}
		}
		_ = cmd.Wait()
		close(p.done)
	}()
	select {
	case p.root = <-addr:
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("hub exited before listening")
	case <-time.After(20 * time.Second):
		p.kill()
		return nil, fmt.Errorf("hub did not start")
	}
}

func (p *hubProc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// cpu is the process's user+system CPU time so far.
func (p *hubProc) cpu() (time.Duration, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name (which may contain spaces) start at ")".
	s := string(raw)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, err1 := strconv.ParseInt(fields[11], 10, 64)
	st, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: unparsable", p.cmd.Process.Pid)
	}
	const ticks = 100 // USER_HZ on Linux
	return time.Duration(ut+st) * time.Second / ticks, nil
}

// buildCodellm builds ./cmd/codellm into dir.
func buildCodellm(dir string) (string, error) {
	out := filepath.Join(dir, "codellm")
	b, err := exec.Command("go", "build", "-o", out, "github.com/codellm/codellm/cmd/codellm").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build ./cmd/codellm: %v\n%s", err, b)
	}
	return out, nil
}
