package chat

import (
	"net/http"

	"github.com/codellm/codellm/internal/contract"
	"github.com/codellm/codellm/internal/pipeline"
)

// trip2g's metric names (metrics.Trip2g) for what the chat core sees: every block that ran, the blocks per
// request, the changes answered and the failed runs.

// trip2gOutcome is a block's codellm_blocks_total{outcome}: trip2g's values where it had one, codellm's
// own outcome where trip2g had none (it failed every block that did not exit 0, SIGPIPE included).
func trip2gOutcome(o pipeline.Outcome) string {
	switch o {
	case pipeline.OutcomeOK:
		return "ok"
	case pipeline.OutcomeFailed:
		return "nonzero_exit"
	case pipeline.OutcomeTimedOut:
		return "timeout"
	case pipeline.OutcomeSandboxError:
		return "start_failed"
	}
	return string(o) // excused, cancelled, output_limit
}

// trip2gKinds maps codellm's error codes onto trip2g's codellm_exec_errors_total{kind}; a code it does not
// list is its own kind (metrics.Trip2gExecErrorKinds).
var trip2gKinds = map[string]string{
	"no_code_blocks":      "no_blocks",
	"unknown_language":    "unknown_fence",
	"program_not_allowed": "disallowed_program",
	"execution_disabled":  "disallowed_program",
	"sandbox_unavailable": "sandbox_refused",
	"bad_output":          "parse_error",
	"internal_error":      "internal",
}

// countExecError counts a failed run: the 422s of the execution path (and codellm's own 500s), not a
// request refused before it (400, 413), a full queue (429) or a draining server (503).
func (s *Service) countExecError(status int, code string) {
	if status != http.StatusUnprocessableEntity && status != http.StatusInternalServerError {
		return
	}
	kind := trip2gKinds[code]
	if kind == "" {
		kind = code
	}
	s.cfg.Metrics.Trip2g.ExecErrors.WithLabelValues(kind).Inc()
}

// observeTrip2g records each block that ran or failed to start (one cancelled before its start did
// neither) and the number of them.
func (s *Service) observeTrip2g(res *pipeline.Result) {
	m := s.cfg.Metrics.Trip2g
	n := 0
	for i, b := range res.Blocks {
		if b.Setup == 0 && b.Outcome != pipeline.OutcomeSandboxError {
			continue
		}
		n++
		exit := -1
		if b.ExitCode != nil {
			exit = *b.ExitCode
		}
		stdout := int64(-1) // only the last block's stdout is captured; the others stream to the next
		if i == len(res.Blocks)-1 {
			stdout = int64(len(b.Stdout))
		}
		m.Block(b.Program, trip2gOutcome(b.Outcome), exit, b.Duration, b.MaxRSS, stdout, b.Outcome == pipeline.OutcomeOutputLimit)
		if s.cfg.Fallback != "" {
			m.SandboxFallbacks.WithLabelValues(s.cfg.Fallback).Inc()
		}
	}
	m.RequestBlocks.Observe(float64(n))
}

// countChanges counts the changes a reply carries, by trip2g's kinds.
func (s *Service) countChanges(calls []contract.ToolCall) {
	for _, c := range calls {
		switch c.Name {
		case contract.ToolWriteNote:
			s.cfg.Metrics.Trip2g.Changes.WithLabelValues("write").Inc()
		case contract.ToolPatchNote:
			s.cfg.Metrics.Trip2g.Changes.WithLabelValues("patch").Inc()
		}
	}
}
