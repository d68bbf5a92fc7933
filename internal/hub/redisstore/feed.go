package redisstore

import (
	"strings"
)

// The change feed's messages. A commit's notified topics reach the other replicas by PUBLISH from inside
// its commit script, on the feed channel every replica subscribes to, or on one replica's own channel for
// a topic only it waits on (store.Txn.NotifyAt). Each PUBLISH is a Redis command paid per commit, so a
// commit sends one message per channel carrying all its topics — and when it has a broadcast at all, its
// targeted topics ride along in that one message (every replica receives it anyway; one that does not wait
// on a topic looks it up and moves on).
//
// A message is
//
//	<origin>[\t<topic>]…\n<topic>
//
// The first line names the sending process (a replica skips its own: its listener was told at commit) and
// then any further topics; the topic after the newline is the one a replica built before topics were
// bundled reads as the whole message (it takes everything after the first newline), so that is where the
// most wanted topic goes: a targeted one — the dispatcher waiting for its settlement — when there is one.
// A topic with a tab or a newline in it is never bundled; it goes in a message of its own.

// feedMessage is one PUBLISH of a commit.
type feedMessage struct{ channel, payload string }

// feedMessages lays out a commit's topics (in notification order; at maps a targeted topic to its replica)
// as messages: feed is the broadcast channel, a replica's own is feed + ":" + its ID.
func feedMessages(feed, origin string, topics []string, at map[string]string) []feedMessage {
	var broadcast []string
	targeted := map[string][]string{}
	var replicas []string
	for _, topic := range topics {
		r := at[topic]
		if r == "" {
			broadcast = append(broadcast, topic)
			continue
		}
		if _, seen := targeted[r]; !seen {
			replicas = append(replicas, r)
		}
		targeted[r] = append(targeted[r], topic)
	}
	var out []feedMessage
	if len(broadcast) > 0 {
		var all []string
		for _, r := range replicas {
			all = append(all, targeted[r]...)
		}
		return bundle(feed, origin, append(all, broadcast...))
	}
	for _, r := range replicas {
		out = append(out, bundle(feed+":"+r, origin, targeted[r])...)
	}
	return out
}

// bundle puts topics on one channel: the first after the newline, the rest that can be bundled on the
// first line, any other in a message of its own.
func bundle(channel, origin string, topics []string) []feedMessage {
	head := origin
	var alone []feedMessage
	for _, topic := range topics[1:] {
		if strings.ContainsAny(topic, "\t\n") {
			alone = append(alone, feedMessage{channel, origin + "\n" + topic})
			continue
		}
		head += "\t" + topic
	}
	return append([]feedMessage{{channel, head + "\n" + topics[0]}}, alone...)
}

// parseFeed reads a message: its sender and its topics (ok false for a message of no known form).
func parseFeed(payload string) (origin string, topics []string, ok bool) {
	head, first, ok := strings.Cut(payload, "\n")
	if !ok {
		return "", nil, false
	}
	origin, rest, bundled := strings.Cut(head, "\t")
	topics = []string{first}
	if bundled {
		topics = append(topics, strings.Split(rest, "\t")...)
	}
	return origin, topics, true
}
