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
// block i's stdout to block i+1's stdin, so bytes never pass through Go on an untapped edge. The parent
// closes its copies of the children's write ends right after each start, so a block's exit is its
// downstream's EOF, and releases each read end as soon as it has seen that block exit (below), so the
// upstream's next write fails with EPIPE. The last block's stdout and every block's stderr are read by
// the parent, capped per §6.
//
// # Deciding outcomes
//
// A single coordinator goroutine receives each block's exit as the sandbox reaps it and applies §5.2 and
// §5.3: the first failing block cancels every sibling at once; a successful last block gives upstream
// blocks the kill grace before they are killed as excused; at the deadline everything still running is
// killed and the run returns no later than deadline + kill grace whatever the processes do.
//
// Only SIGPIPE excuses a block's own end (narrower than openai-contract §5.3, which also excused any
// non-zero exit after the downstream ended, and so let a failing middle block pass unseen): an
// upstream that dies of SIGPIPE, or a shell block that exits 128+SIGPIPE because its command did, lost
// its reader and is excused; any other non-zero exit is a failure and names the block, even when the last
// block had already exited 0 (a middle block that fails after its downstream finished is not masked).
// Programs that ignore SIGPIPE (python, node) exit non-zero on EPIPE instead and so fail the run when
// their reader stops early, unless they restore SIGPIPE or handle EPIPE themselves
// (docs/role-authors.md). The exception is an upstream whose downstream failed first: it ended as a
// consequence of that failure, which is the one reported (outcome cancelled).
//
// Telling "its reader was gone" apart from "it had already ended on its own" takes care: two reapers
// racing cannot tell which block ended first, so the pipeline makes it a fact it observes: the parent
// holds its copy of each block's stdin until it has processed that block's exit, so an edge only breaks
// (the upstream's next write fails) after codellm has seen the downstream end; at that moment it notes
// whether the upstream was still running (/proc: not exiting, not a zombie). Only such an upstream's exit
// can be the consequence of the break; one that had already exited on its own failed (or, exiting 0,
// succeeded), however the reaps were ordered.
//
// # Taps
//
// With [Request.Tap] each edge is two OS pipes joined by a copier that records what it delivered
// downstream (up to the output cap, then marked truncated), closes the downstream write end on upstream
// EOF and the upstream read end as soon as a downstream write fails, so the §5.1–§5.2 behaviour is kept.
package pipeline
