package chat

import (
	"github.com/codellm/codellm/internal/openai"
	"github.com/codellm/codellm/internal/pipeline"
	"github.com/codellm/codellm/internal/seal"
)

// DebugObject renders the x_codellm_debug object (§13) of a run.
func DebugObject(res *pipeline.Result) map[string]any {
	blocks := make([]map[string]any, 0, len(res.Blocks))
	for _, b := range res.Blocks {
		m := openai.DebugBlock{Lang: b.Lang, Program: b.Program, Outcome: string(b.Outcome), ExitCode: b.ExitCode,
			Signal: b.Signal, Duration: b.Duration, MaxRSS: b.MaxRSS, Stdout: b.Stdout, Stderr: b.Stderr,
			StdoutTruncated: b.StdoutTruncated}.Fields()
		m["index"] = b.Index
		openai.PutBytes(m, "pipe_buffer", b.PipeBuffer)
		if b.PipeTruncated {
			m["pipe_buffer_truncated"] = true
		}
		blocks = append(blocks, m)
	}
	return map[string]any{"blocks": blocks}
}

// RedactResult removes opened secrets from everything of a run that can reach a caller or an operator
// besides the parsed tool calls: each block's captures (the x_codellm_debug object) and the error message
// (which quotes stderr). res.Stdout, which becomes the tool calls, is the role's own output and is left
// alone; replacing the captures never aliases it.
func RedactResult(res *pipeline.Result, secrets []string) {
	if len(secrets) == 0 || res == nil {
		return
	}
	for i := range res.Blocks {
		b := &res.Blocks[i]
		b.Stdout = redactCapture(b.Stdout, b.StdoutTruncated, secrets)
		b.Stderr = seal.RedactBytes(b.Stderr, secrets) // cut at its head: the drop line marks it
		b.PipeBuffer = redactCapture(b.PipeBuffer, b.PipeTruncated, secrets)
	}
	if res.Err != nil {
		res.Err.Message = seal.Redact(res.Err.Message, secrets)
	}
}

// redactCapture redacts a capture that may have been cut at its end (over its cap), which can split a
// secret.
func redactCapture(b []byte, truncated bool, secrets []string) []byte {
	if truncated {
		return seal.RedactTruncated(b, secrets)
	}
	return seal.RedactBytes(b, secrets)
}
