package openai

import "time"

// DebugBlock is one block as the x_codellm_debug object (§13) reports it; the debugger's block replies
// (§14.2) carry the same fields, so both are written here.
type DebugBlock struct {
	Lang, Program, Outcome string
	ExitCode               *int   // null when a signal ended the block or it never ran
	Signal                 string // null when ""
	Duration               time.Duration
	MaxRSS                 int64
	Stdout, Stderr         []byte // PutBytes: text, plus _base64 when not valid UTF-8
	StdoutTruncated        bool   // stdout_truncated: true, only when set
}

// Fields renders the block's fields; a caller adds its own (index, pipe_buffer, ok, …).
func (b DebugBlock) Fields() map[string]any {
	m := map[string]any{
		"lang":          b.Lang,
		"program":       b.Program,
		"outcome":       b.Outcome,
		"exit_code":     b.ExitCode,
		"signal":        nil,
		"duration_ms":   b.Duration.Milliseconds(),
		"max_rss_bytes": b.MaxRSS,
	}
	if b.Signal != "" {
		m["signal"] = b.Signal
	}
	PutBytes(m, "stdout", b.Stdout)
	PutBytes(m, "stderr", b.Stderr)
	if b.StdoutTruncated {
		m["stdout_truncated"] = true
	}
	return m
}
