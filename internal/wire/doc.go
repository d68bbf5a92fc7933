// Package wire holds the terms codellm's surfaces share on the wire, each defined once: the chat routes
// (internal/openai, internal/chat), the debugger, the runner API (internal/runner), and the hub with its
// workers (internal/hub, internal/worker, internal/workspace) read and write them alike.
//
//   - header names and values: X-Codellm-Deterministic, X-Codellm-Operation, X-Runtime-Session-Id;
//   - error codes more than one surface answers with (deterministic_unavailable, invalid_metadata,
//     session_workspace_dirty);
//   - the request metadata fields more than one surface reads (deterministic, seed, now, network_allow),
//     their decoding, and [MetadataError], whose text a hub recognises when a worker relays it;
//   - text rules: JSON value kinds in messages, UTF-16 lengths and clipping (the bridge protocol counts
//     JavaScript string units), and the rule for a file name a client sends.
//
// It imports only the standard library, so every surface, and every package below them, may use it.
package wire
