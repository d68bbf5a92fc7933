package wire

import (
	"strconv"
	"time"
)

// Header names.
const (
	// DeterminismHeader says on a reply that the run was deterministic, and with what
	// (DeterminismHeaderValue): the chat routes, the debugger, the runner API and the hub's /v1/exec.
	DeterminismHeader = "X-Codellm-Deterministic"
	// OperationHeader routes a sandbox assignment or a runner execute to another operation than the
	// runner (bridge-protocol §13.2); OperationChat is codellm's chat pipeline.
	OperationHeader = "X-Codellm-Operation"
	// RuntimeSessionHeader binds a runner execute or a workspace command to a persistent session.
	RuntimeSessionHeader = "X-Runtime-Session-Id"
)

// OperationChat is OperationHeader's value for the chat completions pipeline.
const OperationChat = "openai.chat.completions"

// DeterminismHeaderValue is DeterminismHeader's value: the seed, quoted in ASCII, and the clock as
// FormatNow writes it (seed="…"; now=2024-01-02T03:04:05Z).
func DeterminismHeaderValue(seed, now string) string {
	return "seed=" + strconv.QuoteToASCII(seed) + "; now=" + now
}

// FormatNow writes a deterministic run's clock as replies carry it: RFC 3339 in UTC, whole seconds.
func FormatNow(t time.Time) string { return t.UTC().Format(time.RFC3339) }
