package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
)

func inputText(text string) responses.ResponseNewParamsInputUnion {
	return responses.ResponseNewParamsInputUnion{OfString: oai.String(text)}
}

func apiStatus(err error) (int, string) {
	var ae *oai.Error
	if !errors.As(err, &ae) {
		return 0, ""
	}
	return ae.StatusCode, ae.Code
}

// A stored response through openai-go: retrieve gives the created object byte for byte (settings echoed),
// input_items lists the input, a previous_response_id follow-up continues the stored conversation (its
// function_call_output gets the guard's final message with the first answer; a new user message runs the
// earlier code again, found in the stored turn), delete removes it, and "store": false keeps nothing.
func TestResponsesResource(t *testing.T) {
	ts := startServer(t, options{})
	c := oaiClient(ts)
	ctx := context.Background()
	params := responses.ResponseNewParams{Model: "codellm", Input: inputText(writeNoteBlock),
		Temperature: oai.Float(0.3), Metadata: shared.Metadata{"role": "indexer"},
		Tools: []responses.ToolUnionParam{{OfFunction: &responses.FunctionToolParam{Name: "write_note", Parameters: map[string]any{}}},
			{OfFunction: &responses.FunctionToolParam{Name: "finish", Parameters: map[string]any{}}}},
		ToolChoice: responses.ResponseNewParamsToolChoiceUnion{OfToolChoiceMode: oai.Opt(responses.ToolChoiceOptionsRequired)}}
	first, err := c.Responses.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Responses.Get(ctx, first.ID, responses.ResponseGetParams{})
	if err != nil {
		t.Fatal(err)
	}
	if got.RawJSON() != first.RawJSON() || got.Temperature != 0.3 || got.Metadata["role"] != "indexer" || len(got.Tools) != 2 ||
		got.ToolChoice.RawJSON() != `"required"` || !strings.Contains(got.RawJSON(), `"store":true`) || got.Status != "completed" {
		t.Fatalf("retrieved %s\ncreated %s", got.RawJSON(), first.RawJSON())
	}
	page, err := c.Responses.InputItems.List(ctx, first.ID, responses.InputItemListParams{})
	if err != nil || len(page.Data) != 1 || page.Data[0].Type != "message" || !strings.HasPrefix(page.Data[0].ID, "msg_") ||
		!strings.Contains(page.Data[0].RawJSON(), `"type":"input_text"`) || page.HasMore {
		t.Fatalf("input items %v: %+v", err, page)
	}

	// The follow-up sends only the outputs: the guard sees the stored calls.
	before := ts.runs(t)
	calls := first.Output
	var outputs responses.ResponseInputParam
	for _, o := range calls {
		item := responses.ResponseInputItemParamOfFunctionCallOutput("ok")
		item.OfFunctionCallOutput.CallID = oai.String(o.CallID)
		outputs = append(outputs, item)
	}
	next, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "codellm", PreviousResponseID: oai.String(first.ID),
		Input: responses.ResponseNewParamsInputUnion{OfInputItemList: outputs}})
	if err != nil {
		t.Fatal(err)
	}
	if next.Status != "completed" || next.OutputText() != "wrote" || len(next.Output) != 1 || next.Output[0].Type != "message" ||
		next.PreviousResponseID != first.ID || ts.runs(t) != before {
		t.Fatalf("follow-up %s (runs %d)", next.RawJSON(), ts.runs(t)-before)
	}
	// A new user message after the stored turn is a new request: the earlier code runs again.
	again, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "codellm", PreviousResponseID: oai.String(next.ID), Input: inputText("again")})
	if err != nil || len(again.Output) != 2 || again.Output[0].Name != "write_note" || ts.runs(t) != before+1 {
		t.Fatalf("new turn %v %+v (runs %d)", err, again, ts.runs(t)-before)
	}

	if err := c.Responses.Delete(ctx, first.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Responses.Get(ctx, first.ID, responses.ResponseGetParams{}); func() bool { s, code := apiStatus(err); return s != 404 || code != "response_not_found" }() {
		t.Fatalf("deleted response: %v", err)
	}
	params.Store = oai.Bool(false)
	unstored, err := c.Responses.New(ctx, params)
	if err != nil || !strings.Contains(unstored.RawJSON(), `"store":false`) {
		t.Fatal(err)
	}
	if _, err := c.Responses.Get(ctx, unstored.ID, responses.ResponseGetParams{}); func() bool { s, _ := apiStatus(err); return s != 404 }() {
		t.Fatalf("a store:false response was retrieved: %v", err)
	}
	_, err = c.Responses.New(ctx, responses.ResponseNewParams{Model: "codellm", PreviousResponseID: oai.String(unstored.ID), Input: inputText("x")})
	if s, code := apiStatus(err); s != 400 || code != "previous_response_not_found" {
		t.Fatalf("follow-up of an unstored response: %v", err)
	}
}

const writeNoteBlock = "```python\nimport json; print(json.dumps({\"changes\": [{\"path\": \"a.md\", \"content\": \"hi\"}], \"answer\": \"wrote\"}))\n```\n"

// "background": true answers at once (queued) and runs detached: retrieve polls it to completed; a slow
// one is cancelled (its run killed: the blocks never finish) and stays cancelled; a foreground response
// cannot be cancelled. A failed run streams response.failed (the SDK's stream reports it) and is stored
// as failed; tool_choice "none" is refused before anything runs.
func TestResponsesBackgroundCancelFailed(t *testing.T) {
	ts := startServer(t, options{})
	c := oaiClient(ts)
	ctx := context.Background()
	bg := func(code string) *responses.Response {
		t.Helper()
		r, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "codellm", Background: oai.Bool(true), Input: inputText(code)})
		if err != nil || r.Status != "queued" || !strings.Contains(r.RawJSON(), `"background":true`) {
			t.Fatalf("background create: %v %+v", err, r)
		}
		return r
	}
	quick := bg(writeNoteBlock)
	waitFor(t, func() bool {
		r, err := c.Responses.Get(ctx, quick.ID, responses.ResponseGetParams{})
		return err == nil && r.Status == "completed" && len(r.Output) == 2 && r.Output[1].Name == "finish"
	})
	slow := bg(block("bash", `sleep 30; echo '{"answer":"late"}'`))
	waitFor(t, func() bool { return ts.inFlight(t) == 1 })
	cancelled, err := c.Responses.Cancel(ctx, slow.ID)
	if err != nil || cancelled.Status != "cancelled" {
		t.Fatalf("cancel: %v %+v", err, cancelled)
	}
	waitFor(t, func() bool { return ts.inFlight(t) == 0 }) // the run was killed, not waited for
	if r, err := c.Responses.Get(ctx, slow.ID, responses.ResponseGetParams{}); err != nil || r.Status != "cancelled" || len(r.Output) != 0 {
		t.Fatalf("after cancel: %v %+v", err, r)
	}
	if r, err := c.Responses.Cancel(ctx, slow.ID); err != nil || r.Status != "cancelled" {
		t.Fatalf("cancelling again: %v %+v", err, r)
	}
	if _, err := c.Responses.Cancel(ctx, quick.ID); func() bool { s, code := apiStatus(err); return s != 400 || code != "response_not_cancellable" }() {
		t.Fatalf("cancelling a completed response: %v", err)
	}

	s := c.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "codellm", Input: inputText(block("bash", "echo boom >&2; exit 3"))})
	var types []string
	var failed responses.Response
	for s.Next() {
		ev := s.Current()
		types = append(types, ev.Type)
		if ev.Type == "response.failed" {
			failed = ev.Response
		}
	}
	s.Close()
	if strings.Join(types, " ") != "response.created response.in_progress response.failed" || failed.Status != "failed" ||
		failed.Error.Code != "nonzero_exit" || !strings.Contains(failed.Error.Message, "boom") {
		t.Fatalf("failed stream: %v %s (err %v)", types, failed.RawJSON(), s.Err())
	}
	if r, err := c.Responses.Get(ctx, failed.ID, responses.ResponseGetParams{}); err != nil || r.Status != "failed" || r.Error.Code != "nonzero_exit" {
		t.Fatalf("stored failure: %v %+v", err, r)
	}
	before := ts.runs(t)
	_, err = c.Responses.New(ctx, responses.ResponseNewParams{Model: "codellm", Input: inputText(writeNoteBlock),
		ToolChoice: responses.ResponseNewParamsToolChoiceUnion{OfToolChoiceMode: oai.Opt(responses.ToolChoiceOptionsNone)}})
	if s, code := apiStatus(err); s != 400 || code != "invalid_tool_choice" || ts.runs(t) != before {
		t.Fatalf("tool_choice none: %v", err)
	}
}

// input_items pages through the items in both orders.
func TestResponsesInputItemsPages(t *testing.T) {
	ts := startServer(t, options{})
	var items []any
	for i := range 3 {
		items = append(items, map[string]any{"role": "user", "content": "note " + string(rune('a'+i))})
	}
	items = append(items, map[string]any{"role": "user", "content": writeNoteBlock})
	// Stored per credential: created with the key the SDK client sends (the server itself has none).
	status, _, body := ts.post(t, "/v1/responses", map[string]any{"input": items}, "Authorization", "Bearer unused")
	var r struct{ ID string }
	if err := json.Unmarshal(body, &r); err != nil || status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	c := oaiClient(ts)
	var texts []string
	iter := c.Responses.InputItems.ListAutoPaging(context.Background(), r.ID, responses.InputItemListParams{Limit: oai.Int(2), Order: "asc"})
	for iter.Next() {
		texts = append(texts, iter.Current().AsMessage().Content[0].Text[:6])
	}
	if err := iter.Err(); err != nil || strings.Join(texts, ",") != "note a,note b,note c,```pyt" {
		t.Fatalf("asc pages: %v %v", err, texts)
	}
	page, err := c.Responses.InputItems.List(context.Background(), r.ID, responses.InputItemListParams{})
	if err != nil || len(page.Data) != 4 || page.Data[0].AsMessage().Content[0].Text != writeNoteBlock || page.HasMore {
		t.Fatalf("desc: %v %+v", err, page)
	}
	status, _, body = ts.get(t, "/v1/responses/"+r.ID+"/input_items?limit=0")
	wantError(t, status, body, 400, "invalid_request", "limit")
	status, _, body = ts.get(t, "/v1/responses/"+r.ID+"/input_items")
	wantError(t, status, body, 404, "response_not_found", r.ID) // another credential's response
}
