package redisstore

import (
	"slices"
	"strings"
	"testing"
)

// A commit's topics go out as one message per channel, its targeted topics inside its broadcast when it
// has one (first, where a replica of the previous format reads), and read back as sent; a topic that
// cannot be bundled gets a message of its own.
func TestFeedMessages(t *testing.T) {
	cases := []struct {
		name   string
		topics []string
		at     map[string]string
		want   []feedMessage
	}{
		{"one broadcast", []string{"free"}, nil, []feedMessage{{"f", "o\nfree"}}},
		{"several broadcast", []string{"w:x", "free", "pools"}, nil, []feedMessage{{"f", "o\tfree\tpools\nw:x"}}},
		{"targeted only", []string{"a:1"}, map[string]string{"a:1": "r"}, []feedMessage{{"f:r", "o\na:1"}}},
		{"targeted at two replicas", []string{"a:1", "a:2", "a:3"}, map[string]string{"a:1": "r", "a:2": "s", "a:3": "r"},
			[]feedMessage{{"f:r", "o\ta:3\na:1"}, {"f:s", "o\na:2"}}},
		{"settlement and a freed slot", []string{"free", "a:1"}, map[string]string{"a:1": "r"}, []feedMessage{{"f", "o\tfree\na:1"}}},
		{"a topic with a tab", []string{"free", "idem:x\ty", "w:x y"}, nil, []feedMessage{{"f", "o\tw:x y\nfree"}, {"f", "o\nidem:x\ty"}}},
		{"a first topic with a newline", []string{"idem:x\ny", "free"}, nil, []feedMessage{{"f", "o\tfree\nidem:x\ny"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := feedMessages("f", "o", c.topics, c.at)
			if !slices.Equal(got, c.want) {
				t.Fatalf("messages %q, want %q", got, c.want)
			}
			var heard []string
			for _, m := range got {
				origin, topics, ok := parseFeed(m.payload)
				if !ok || origin != "o" {
					t.Fatalf("parse %q: origin %q ok %v", m.payload, origin, ok)
				}
				heard = append(heard, topics...)
			}
			if slices.Sort(heard); !slices.Equal(heard, slices.Sorted(slices.Values(c.topics))) {
				t.Fatalf("read back %q, want %q", heard, c.topics)
			}
		})
	}
	// A message of the previous format (one topic, no bundle) reads as before.
	if origin, topics, ok := parseFeed("o\nw:x y"); !ok || origin != "o" || !slices.Equal(topics, []string{"w:x y"}) {
		t.Fatalf("previous format: %q %q %v", origin, topics, ok)
	}
	if _, _, ok := parseFeed(strings.Repeat("x", 8)); ok {
		t.Fatal("a message without a newline was read")
	}
}
