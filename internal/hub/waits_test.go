package hub

import (
	"testing"

	"github.com/codellm/codellm/internal/hub/store"
)

// A notification of work queued for a worker wakes that worker's lease polls with the assignment it
// names, and nobody else; a wake of every topic (a change feed that lost messages) carries no hint.
func TestWakeHint(t *testing.T) {
	w := newWaits()
	ch, hint, release := w.watchHint(store.TopicWorker("vm-1"))
	defer release()
	other, otherHint, releaseOther := w.watchHint(store.TopicWorker("vm-10"))
	defer releaseOther()
	if hint() != "" {
		t.Fatal("a hint before any wake")
	}
	w.wake(store.SplitTopic(store.TopicWorkQueued("vm-1", "asg-A")))
	select {
	case <-ch:
	default:
		t.Fatal("the queued work did not wake its worker's poll")
	}
	if got := hint(); got != "asg-A" {
		t.Fatalf("hint %q, want asg-A", got)
	}
	select {
	case <-other:
		t.Fatal("another worker's poll was woken")
	default:
	}
	w.wake("", "")
	<-other
	if got := otherHint(); got != "" {
		t.Fatalf("a wake of every topic carried hint %q", got)
	}
}
