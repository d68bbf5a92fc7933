//go:build linux

package spawner

import "syscall"

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
}

// Reply is the spawner's answer: the child's PID, or the errno and text of
// why there is none.
type Reply struct {
	PID   int    `json:"pid,omitempty"`
	Errno int    `json:"errno,omitempty"`
	Error string `json:"error,omitempty"`
}
