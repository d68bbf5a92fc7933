package sandbox

// helperMarker is argv[1] of the re-executed helper. It is not a flag any
// codellm command accepts, so the helper can never be entered by accident.
const helperMarker = "\x01codellm-sandbox-helper"

// Descriptor numbers in the helper: 0-2 are the block's stdio, the spec
// arrives on specFD and setup errors leave on statusFD.
const (
	specFD   = 3
	statusFD = 4
	// dirFD is the workdir opened by the server: the helper's uid may not be
	// allowed to traverse the workdir's parent directories on the host.
	dirFD = 5
)

// startedByte is written on the status pipe right before execve: EOF after
// it means the program runs; anything after it is an exec failure; EOF
// without it means the helper died during setup.
const startedByte = 'X'

// Sandbox identity inside the user namespace.
const (
	sandboxUID  = 1000
	sandboxGID  = 1000
	sandboxUser = "sandbox"
	sandboxHost = "codellm"
)

// helperSpec is what the server sends the helper on specFD (JSON).
type helperSpec struct {
	Path    string   `json:"path"`
	Args    []string `json:"args"`
	Env     []string `json:"env"`
	Dir     string   `json:"dir"`
	Persist bool     `json:"persist"`
	// DirIsTree: dirFD is a detached mount of the workdir (open_tree)
	// to attach, not a plain directory descriptor.
	DirIsTree bool `json:"dir_is_tree,omitempty"`

	Mech    mechSet `json:"mech"`
	Network bool    `json:"network"`

	TmpSize    int64  `json:"tmp_size"`
	FileSize   int64  `json:"file_size"`
	OpenFiles  int    `json:"open_files"`
	CPUSeconds uint64 `json:"cpu_seconds"`

	// ProbeOnly: apply everything, then exit 0 instead of exec'ing.
	ProbeOnly bool `json:"probe_only,omitempty"`
}

// helperError is what the helper reports on statusFD when it fails.
type helperError struct {
	Mechanism string `json:"mechanism"`
	Reason    string `json:"reason"`
	Fix       string `json:"fix,omitempty"`
}
