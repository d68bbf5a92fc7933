// Package execution is codellm's one capture/limit/kill core: how a confined program ended (a typed
// [Status] plus the numbers, [Outcome]), the one signal-name table ([SignalName]), the one
// terminate-then-kill policy ([Stop]), bounded capture of stdout and stderr ([Capture]) and the
// supervision of one program from start to confirmed end ([Supervise]).
//
// Every surface maps an Outcome in one table of its own: the runner's Piston status (TO, OL, EL, RE,
// SG, XX), the pipeline's outcomes and OpenAI error codes, the workspace's execute_command result and
// the metric reasons of codellm_kills_total ([Status.MetricReason]). No surface parses English: limit
// descriptions ([Outcome.LimitDesc]) are for messages only.
//
// The pipeline (many blocks joined by pipes) keeps its own streaming coordinator and uses [Of],
// [SignalName] and [Stop]; the runner and workspace commands (one program) use [Supervise].
package execution
