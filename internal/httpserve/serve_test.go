package httpserve

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// serveOne starts Serve with handler h on a loopback listener and returns its address and result.
func serveOne(t *testing.T, ctx context.Context, h http.Handler, o Options) (string, <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, h, o) }()
	return ln.Addr().String(), done
}

// An in-flight request finishes within the grace; Draining runs first and the run context outlives the
// serving context until then.
func TestServeDrains(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	entered := make(chan struct{})
	release := make(chan struct{})
	var drained atomic.Bool
	var runs context.Context
	addr, done := serveOne(t, ctx, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-release
		if r.Context().Err() != nil {
			t.Error("the request context was cancelled within the grace")
		}
		w.WriteHeader(204)
	}), Options{Started: func(c context.Context) { runs = c }, Draining: func() { drained.Store(true); close(release) }})
	resc := make(chan int, 1)
	go func() {
		resp, err := http.Get("http://" + addr + "/")
		if err != nil {
			resc <- -1
			return
		}
		resp.Body.Close()
		resc <- resp.StatusCode
	}()
	<-entered
	cancel()
	if code := <-resc; code != 204 {
		t.Fatalf("in-flight request: %d", code)
	}
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if !drained.Load() || runs.Err() == nil {
		t.Fatalf("drained %v, run context err %v", drained.Load(), runs.Err())
	}
}

// A request that outlives the grace has its context cancelled, gets AfterCancel to return, and Serve
// reports the deadline.
func TestServeCancelsAfterGrace(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	entered := make(chan struct{})
	returned := make(chan struct{})
	addr, done := serveOne(t, ctx, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-r.Context().Done() // a run that only stops when killed
		w.WriteHeader(503)
		close(returned)
	}), Options{Grace: 50 * time.Millisecond, AfterCancel: 5 * time.Second})
	go func() {
		if resp, err := http.Get("http://" + addr + "/"); err == nil {
			resp.Body.Close()
		}
	}()
	<-entered
	cancel()
	err := <-done
	select {
	case <-returned:
	default:
		t.Fatal("Serve returned before the cancelled handler did")
	}
	if err != nil {
		t.Fatalf("Serve: %v (the handler returned within AfterCancel)", err)
	}
}

// Without AfterCancel, connections still open after the grace are closed and the deadline is reported.
func TestServeClosesWithoutAfterCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	entered := make(chan struct{})
	stuck := make(chan struct{})
	defer close(stuck)
	addr, done := serveOne(t, ctx, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		<-stuck
	}), Options{Grace: 50 * time.Millisecond})
	errc := make(chan error, 1)
	go func() {
		resp, err := http.Get("http://" + addr + "/")
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	<-entered
	cancel()
	if err := <-done; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Serve = %v, want the deadline", err)
	}
	if err := <-errc; err == nil {
		t.Fatal("the stuck request's connection was not closed")
	}
}

// A listener that fails ends Serve with its error, without Draining.
func TestServeListenerError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	drained := false
	err = Serve(context.Background(), ln, http.NotFoundHandler(), Options{Draining: func() { drained = true }})
	if err == nil || errors.Is(err, http.ErrServerClosed) || drained {
		t.Fatalf("Serve on a closed listener = %v (drained %v)", err, drained)
	}
}
