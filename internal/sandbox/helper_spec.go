package sandbox

// Sandbox identity inside the user namespace.
const (
	sandboxUID  = 1000
	sandboxGID  = 1000
	sandboxUser = "sandbox"
	sandboxHost = "codellm"
)
