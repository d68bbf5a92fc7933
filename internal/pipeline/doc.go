// Package pipeline runs the code blocks of one request as a concurrent, streaming pipeline of sandboxed
// processes joined by OS pipes, and decides how each block — and so the run — ended.
//
// It implements openai-contract.md §5 (workdirs, invocation, pipeline, termination guarantees, outcomes
// and error selection, debug taps), the capture limits of §6 and the environment of §7 (through
// [Step.Env], or [DefaultEnv] when a step has none). It knows nothing about HTTP, interpreters or the
// output contract: the server resolves programs and builds environments, the pipeline runs them.
//
// # Shape of a run
//
// Every block gets a fresh 0700 workdir holding exactly run<ext>, input.json and an empty tmp/. The blocks
// are started in order, each through [sandbox.Run.Start], before any is waited for; one OS pipe joins
// block i's stdout to block i+1's stdin, so bytes never pass through Go on an untapped edge, and the
// parent closes its copies of the children's pipe ends right after each start so that EOF and EPIPE
// propagate exactly as in a shell pipeline. The last block's stdout and every block's stderr are read by
// the parent, capped per §6.
//
// # Deciding outcomes
//
// A single coordinator goroutine receives each block's exit in the order the sandbox reaps them (that
// order is what §5.3 means by "terminated before") and applies §5.2 and §5.3: the first failing block
// cancels every sibling at once; a successful last block gives upstream blocks the kill grace before
// they are killed as excused; an upstream that exits non-zero after its downstream finished ok or
// excused is excused (in native mode the block is PID 1 of its namespace, which ignores SIGPIPE, so
// `yes` exits 1 with EPIPE instead of dying of SIGPIPE); at the deadline everything still running is
// killed and the run returns no later than deadline + kill grace whatever the processes do.
//
// # Taps
//
// With [Request.Tap] each edge is two OS pipes joined by a copier that records what it delivered
// downstream (up to the output cap, then marked truncated), closes the downstream write end on upstream
// EOF and the upstream read end as soon as a downstream write fails, so the §5.1–§5.2 behaviour is kept.
package pipeline
