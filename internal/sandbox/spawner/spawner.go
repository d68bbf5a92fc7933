// Package spawner is a small process that clones sandbox helpers on the
// server's behalf, so that the server itself never forks.
//
// Why it exists: a clone that makes a user namespace cannot share the
// caller's memory (the child has to wait for its uid map, so Go's syscall
// package forks instead of vforking). Forking the server copies its page
// tables and write-protects every page of its heap. The child execs at once
// and drops its copy, but the server then takes a copy-on-write fault, with
// a TLB-shootdown IPI to each other CPU running one of its threads, for
// every heap page it writes next. A profile of `codellm serve` at c=4
// (BENCHMARKS.md) put that at about 16 % of the server's own CPU. The
// spawner is a re-executed codellm that has done nothing but start: its
// heap is a few pages, its forks are cheap, and the server's heap is never
// write-protected.
//
// The helpers it starts are the server's children, not its own: the
// spawner clones with CLONE_PARENT, so the server waits for them, signals
// them through pidfds and they get the server's parent-death signal, as if
// the server had cloned them. The spawner can only exec the one executable
// and argv it was started with (the sealed helper binary); a request
// chooses the environment, descriptors and namespace attributes only.
//
// A raw request ([Request].Raw) asks for the raw helper instead: the
// spawner compiles the block's spec (package rawhelper) and forks a child
// of its own that runs it without exec'ing anything (package rawchild),
// or answers [Reply].Fallback for a block only the Go helper serves. It
// clones that child with its user and PID namespaces only; the child makes
// the rest itself, off the spawner's loop. After each raw reply without
// clone3's cgroup placement (cgroup v1) it forks the next such block's
// helper ahead (raw_linux.go), an idle child named idleName that makes its
// namespaces while it waits and that the spawner kills when it ends.
//
// A spawner answers one request at a time: its loop is a serial section of
// every block's start. Each [Reply] carries how long the loop has worked so
// far ([Reply].Busy), and the client adds up how long callers held it
// ([Spawner.Stats]); package sandbox runs several spawners, one more
// whenever every running one is busy, and exports both as metrics.
//
// Started as root with directories to overlay ([Start]'s overlay), the
// spawner first makes them read-only overlays in a mount namespace of its
// own, which every helper's namespace is then a copy of (overlay_linux.go).
//
// Wire format (a SOCK_SEQPACKET socket pair): the spawner's first message
// is a JSON [Hello]; then one request, one reply: the request is a JSON
// [Request] (for a raw one followed by a NUL byte and the encoded spec) with
// the child's descriptors attached as SCM_RIGHTS, in order, followed by the
// cgroup descriptor when Request.CgroupFD is set; the reply is a JSON
// [Reply].
package spawner

import "time"

// Marker is argv[1] of a spawner process; EnvMarker=1 is in its
// environment, and EnvOverlay the JSON list of [OverlayDir] to make.
const (
	Marker     = "\x01codellm-sandbox-spawner"
	EnvMarker  = "CODELLM_SANDBOX_SPAWNER"
	EnvOverlay = "CODELLM_SANDBOX_SPAWNER_OVERLAY"
)

// Descriptors of a spawner process: its end of the socket pair and the
// executable it clones helpers of.
const (
	sockFD = 3
	exeFD  = 4
)

// unexecName is the spawner's thread name, which a forked child carries
// until its exec replaces it: a zombie child of the server with this name
// is a clone that failed before it exec'd (see reapUnexeced).
const unexecName = "codellm-spawner"

// idleName is a raw helper's name while it waits for a block (it renames
// itself when it gets one): the server reaps a zombie by this name once it
// has reaped the spawner that forked it (the spawner kills its idle helper
// as it ends; the server never learnt that PID).
const idleName = "codellm-idle"

// idleGrace bounds how long an ending spawner waits for its idle helper's end.
const idleGrace = 200 * time.Millisecond

// maxFiles bounds the descriptors of one request (a helper gets at most
// seven, plus the cgroup's).
const maxFiles = 16

// maxMessage bounds one request; maxReply one reply (a PID, or an errno and its text), read into a
// buffer allocated per request.
const (
	maxMessage = 64 << 10
	maxReply   = 4 << 10
)
