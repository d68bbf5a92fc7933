package wire

// Error codes answered by more than one surface (the "code" of an OpenAI error envelope, the "error"
// member of a runner or workspace reply).
const (
	// CodeDeterministicUnavailable (501): the request asked for deterministic mode and this server's
	// sandbox cannot honour every piece of it. Nothing ran.
	CodeDeterministicUnavailable = "deterministic_unavailable"
	// CodeInvalidMetadata (400): a request metadata field is malformed or refused (MetadataError).
	CodeInvalidMetadata = "invalid_metadata"
	// CodeSessionWorkspaceDirty (409): a runtime session's workspace is in an unknown state after a run
	// that was killed mid-way; it refuses work until it is reset.
	CodeSessionWorkspaceDirty = "session_workspace_dirty"
)
