package slots

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestAcquireRelease(t *testing.T) {
	p := New(2, 10*time.Millisecond)
	r1, _, err := p.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	r2, _, err := p.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := p.InFlight(); got != 2 {
		t.Fatalf("InFlight = %d, want 2", got)
	}
	if _, _, err := p.Acquire(context.Background()); !errors.Is(err, ErrBusy) {
		t.Fatalf("third Acquire: err = %v, want ErrBusy", err)
	}
	r1()
	r1() // idempotent: must not free a second slot
	if got := p.InFlight(); got != 1 {
		t.Fatalf("InFlight after release = %d, want 1", got)
	}
	r3, _, err := p.Acquire(context.Background())
	if err != nil {
		t.Fatalf("Acquire after release: %v", err)
	}
	if _, _, err := p.Acquire(context.Background()); !errors.Is(err, ErrBusy) {
		t.Fatalf("double release freed an extra slot: err = %v", err)
	}
	r2()
	r3()
}

func TestAcquireWaitsForRelease(t *testing.T) {
	p := New(1, 10*time.Second)
	r, _, _ := p.Acquire(context.Background())
	go func() { time.Sleep(20 * time.Millisecond); r() }()
	r2, waited, err := p.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if waited <= 0 {
		t.Fatalf("waited = %v, want > 0", waited)
	}
	r2()
}

func TestAcquireCancelled(t *testing.T) {
	p := New(1, 10*time.Second)
	r, _, _ := p.Acquire(context.Background())
	defer r()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := p.Acquire(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if p.Waiting() != 0 {
		t.Fatalf("Waiting = %d after cancel", p.Waiting())
	}
}
