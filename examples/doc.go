// Package examples holds the files the README and the guides use in their examples — role.md and
// bag.json (a role and its delivery bag), pipeline.md (three blocks to step through), request.json (a chat
// request body) and client/ (the README's Go client) — and the test that runs every shell example of the
// README and docs/ exactly as printed against real codellm processes (examples_test.go).
//
// The commands are run from a directory laid out like the repository's root after `make build`:
// bin/codellm, examples/, with codellm also on PATH.
package examples
