//go:build linux

package spawner

import (
	"syscall"
	"time"
)

// Request asks for one helper: the fields of syscall.SysProcAttr the
// sandbox uses. Files descriptors are attached to the message.
type Request struct {
	Env         []string               `json:"env"`
	Files       int                    `json:"files"`
	CgroupFD    bool                   `json:"cgroup_fd,omitempty"`
	Setsid      bool                   `json:"setsid,omitempty"`
	Pdeathsig   syscall.Signal         `json:"pdeathsig,omitempty"`
	Cloneflags  uintptr                `json:"cloneflags"`
	UIDMappings []syscall.SysProcIDMap `json:"uid_mappings,omitempty"`
	GIDMappings []syscall.SysProcIDMap `json:"gid_mappings,omitempty"`
	Setgroups   bool                   `json:"setgroups,omitempty"`
	Credential  *syscall.Credential    `json:"credential,omitempty"`
	AmbientCaps []uintptr              `json:"ambient_caps,omitempty"`
	// Raw, when set, asks for the raw helper (package rawhelper) instead of
	// an exec of the helper binary; Credential and AmbientCaps are then
	// unused (the raw helper takes Raw.UID inside its namespace and keeps
	// its capabilities there until its lockdown).
	Raw *Raw `json:"raw,omitempty"`
}

// Raw is a raw helper's block: its spec, and what the spawner cannot know.
// Its descriptors are stdin, stdout, stderr, the status pipe and the
// workdir (RawFiles).
type Raw struct {
	// Spec is hook.Spec.Encode, sent after the JSON and a NUL byte (which
	// JSON text never holds) rather than as base64 inside it.
	Spec        []byte   `json:"-"`
	CgroupFiles []string `json:"cgroup_files,omitempty"` // rawhelper.Host.CgroupFiles
	UID         int      `json:"uid"`
	GID         int      `json:"gid"`
}

// RawFiles is how many descriptors a raw request carries (before the
// cgroup's): one more for a block with egress, its end of the socket pair
// it sends its listener on.
const RawFiles = 5

// Reply is the spawner's answer: the child's PID, or the errno and text of
// why there is none.
type Reply struct {
	PID   int    `json:"pid,omitempty"`
	Errno int    `json:"errno,omitempty"`
	Error string `json:"error,omitempty"`
	// Fallback, for a raw request, is why the raw helper cannot serve the
	// block (nothing was started; the caller starts the Go helper).
	Fallback string `json:"fallback,omitempty"`
	// Discarded are idle raw helpers the spawner killed unused (children
	// of the server, which reaps them).
	Discarded []int `json:"discarded,omitempty"`
	// Busy is how long the spawner has worked on requests so far, this one
	// included (the helper it forks after a reply counts with the next).
	Busy time.Duration `json:"busy_ns"`
}
