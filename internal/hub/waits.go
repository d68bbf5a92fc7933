package hub

import "sync"

// waits is the hub's wake-up board. A waiter — a worker's lease poll, a dispatcher waiting for its
// settlement, a queued client — takes the channel of exactly the topic it waits for (store.TopicWorker,
// TopicAssignment, TopicFree, an idempotency key) before it reads the store, and sleeps on it; a commit
// that notifies the topic (here through the backend's listener, on other replicas through the change feed)
// closes that channel, waking those waiters and no others. A fleet of idle workers therefore costs the
// store nothing between their own requests, and one settlement wakes one dispatcher.
type waits struct {
	mu     sync.Mutex
	topics map[string]*topicWait
}

type topicWait struct {
	ch   chan struct{}
	refs int
	// hint is what the notification that closed ch carried (store.SplitTopic), set before the close.
	hint string
}

func newWaits() *waits { return &waits{topics: map[string]*topicWait{}} }

// watch returns the channel the next notification of topic closes, and the release the waiter calls
// when it stops waiting (it may watch again after a wake).
func (w *waits) watch(topic string) (<-chan struct{}, func()) {
	ch, _, release := w.watchHint(topic)
	return ch, release
}

// watchHint is watch that also returns, for after the channel closed, the hint of the notification that
// closed it ("" for none).
func (w *waits) watchHint(topic string) (<-chan struct{}, func() string, func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	tw := w.topics[topic]
	if tw == nil {
		tw = &topicWait{ch: make(chan struct{})}
		w.topics[topic] = tw
	}
	tw.refs++
	hint := func() string {
		select {
		case <-tw.ch:
			return tw.hint // written before the close
		default:
			return ""
		}
	}
	return tw.ch, hint, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		tw.refs--
		if tw.refs == 0 && w.topics[topic] == tw {
			delete(w.topics, topic)
		}
	}
}

// wake closes topic's channel, leaving hint for its waiters; "" wakes every topic (after a change feed
// lost messages).
func (w *waits) wake(topic, hint string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if topic == "" {
		for k, tw := range w.topics {
			close(tw.ch)
			delete(w.topics, k)
		}
		return
	}
	if tw := w.topics[topic]; tw != nil {
		tw.hint = hint
		close(tw.ch)
		delete(w.topics, topic)
	}
}
