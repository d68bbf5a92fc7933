package server_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	goopenai "github.com/sashabaranov/go-openai"
)

// fleetLoop reproduces trip2g's agent loop (internal/agentruntime's Run, with its go-openai client
// OpenAILLM.Chat) step for step: call the model with the conversation and the tools; no tool calls means a
// final answer (the content); otherwise append the assistant turn, and per call in order: finish ends the
// run with its answer, any other call is applied and its result appended as a tool message. The loop
// gives up after maxSteps requests. It returns what fleet would record: the applied writes, the answer,
// the status and the number of model requests.
func fleetLoop(t *testing.T, client *goopenai.Client, req goopenai.ChatCompletionRequest, maxSteps int) (writes []string, answer, status string, steps int) {
	t.Helper()
	status = "max_steps"
	for range maxSteps {
		resp, err := client.CreateChatCompletion(context.Background(), req)
		if err != nil {
			t.Fatalf("step %d: %v", steps, err)
		}
		steps++
		msg := resp.Choices[0].Message
		if len(msg.ToolCalls) == 0 {
			return writes, msg.Content, "completed", steps
		}
		req.Messages = append(req.Messages, goopenai.ChatCompletionMessage{Role: "assistant", Content: msg.Content, ToolCalls: msg.ToolCalls})
		for _, call := range msg.ToolCalls {
			var args struct{ Path, Answer string }
			if err := json.Unmarshal([]byte(call.Function.Arguments), &args); err != nil {
				t.Fatalf("call %s arguments %q: %v", call.Function.Name, call.Function.Arguments, err)
			}
			if call.Function.Name == "finish" {
				return writes, args.Answer, "completed", steps
			}
			writes = append(writes, call.Function.Name+":"+args.Path)
			req.Messages = append(req.Messages, goopenai.ChatCompletionMessage{Role: "tool", ToolCallID: call.ID,
				Name: call.Function.Name, Content: "ok: wrote " + args.Path})
		}
	}
	return writes, answer, status, steps
}

// Fleet's loop, with the real go-openai client, applies each write of codellm's answer once and ends at
// its finish, with MaxSteps 1 as fleet pins code roles and with MaxSteps 2; the code runs once per loop.
// fleet stops at finish and at a reply without tool calls alike, so the re-execution guard's final text
// (below) ends its loop too: it needs no finish call from the guard.
func TestFleetLoopAppliesWritesOnce(t *testing.T) {
	ts := startServer(t, options{})
	for _, maxSteps := range []int{1, 2} {
		before := ts.runs(t)
		writes, answer, status, steps := fleetLoop(t, goClient(ts), fleetRequest("codellm"), maxSteps)
		if strings.Join(writes, ",") != "write_note:index/changed.md,patch_note:index/log.md" || answer != "indexed 2 file(s)" ||
			status != "completed" || steps != 1 {
			t.Fatalf("MaxSteps %d: writes %v, answer %q, status %s after %d requests", maxSteps, writes, answer, status, steps)
		}
		if n := ts.runs(t) - before; n != 1 {
			t.Fatalf("MaxSteps %d: the code ran %d times", maxSteps, n)
		}
	}
	// A loop that forgets to stop at finish (it applies the writes, appends the results and asks again)
	// gets the guard's final message: fleet's loop reads a reply without tool calls as the answer.
	req := fleetRequest("codellm")
	resp, err := goClient(ts).CreateChatCompletion(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	msg := resp.Choices[0].Message
	req.Messages = append(req.Messages, goopenai.ChatCompletionMessage{Role: "assistant", ToolCalls: msg.ToolCalls})
	for _, c := range msg.ToolCalls {
		req.Messages = append(req.Messages, goopenai.ChatCompletionMessage{Role: "tool", ToolCallID: c.ID, Content: "ok"})
	}
	before := ts.runs(t)
	writes, answer, status, steps := fleetLoop(t, goClient(ts), req, 2)
	if len(writes) != 0 || answer != "indexed 2 file(s)" || status != "completed" || steps != 1 || ts.runs(t) != before {
		t.Fatalf("second step: writes %v, answer %q, status %s after %d requests, %d runs", writes, answer, status, steps, ts.runs(t)-before)
	}
}
