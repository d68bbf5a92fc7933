package main

import (
	"io"

	"github.com/codellm/codellm/internal/hub"
)

// cmdHub is `codellm hub [serve|pair|revoke|status]` (bridge-protocol.md §12); the hub package owns the
// flags and reads CODELLM_HUB_* with the LIBRECHAT_CODE_* and CODEAPI_BRIDGE_* aliases.
func cmdHub(args []string, stdout, stderr io.Writer) int {
	return hub.RunCLI(args, stdout, stderr)
}
