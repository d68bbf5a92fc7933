// Package workspace runs the bridge protocol's workspace tools (bridge-protocol.md §9) against one registered
// local directory: read_file, search_text, list_files, write_file, edit_file, preview_edit and execute_command.
//
// Its one job is confinement: no request, however crafted, may read or write outside the registered root.
// Every path is validated as a portable path, then resolved beneath a descriptor of the root that was opened
// once at registration (openat2 with RESOLVE_BENEATH on Linux, os.Root elsewhere), with the final component
// opened O_NOFOLLOW and the descriptor fstat'ed before use. Writes refuse symlinks in every component, stage the
// bytes in an owner-only temporary file beside the target and install them with rename or link, then re-open
// and verify what was installed. execute_command runs only inside codellm's own sandbox (internal/sandbox) with
// the root as the only writable mount; there is no host-shell fallback.
//
// Results and errors never contain host paths: callers see paths only in the caller's own relative spelling.
//
// # Use
//
// The worker opens each registered directory once with [Open] (or [EnsureDefault] for the application-owned
// default workspace), advertises [Workspace.Operations], and runs each assignment's request with
// [Workspace.Do], adding the §9.1 envelope (protocolVersion, operation, workspaceId) to the result. Errors are
// *[Error] values with a §9.9 code; MayHaveCommitted marks the ones after which the quarantine marker must be
// kept. Arming that marker before write_file, edit_file and execute_command (§10) is the worker's job.
// [RunCLI] is the `codellm workspace` front end.
//
// search_text and list_files enumerate candidates with ripgrep (rg); without it they fail with
// SEARCH_UNAVAILABLE / LIST_UNAVAILABLE and say how to install it.
package workspace
