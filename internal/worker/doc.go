// Package worker is `codellm worker`: the outbound half of the bridge protocol (bridge-protocol.md §4–§6,
// §8, §10, §11). It pairs a worker identity with a hub, then registers with two-phase capability
// negotiation, long-polls for one assignment at a time, acknowledges it, executes it on a runtime
// supervisor (codellm's runner in-process, or a loopback runner endpoint) or on a registered workspace,
// and settles the result — keeping the hub's fencing, expiry and quarantine rules on the worker side so
// that an assignment is never executed twice, never settled by a stale incarnation, and never silently
// lost after it may have changed local state.
//
// Its one job is to be the worker loop; wire types, canonical JSON and signing come from internal/bridge,
// execution from internal/runner and internal/workspace.
package worker
