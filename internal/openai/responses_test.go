package openai

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestDecodeResponsesRequest(t *testing.T) {
	r, e := DecodeResponsesRequest([]byte(`{"model":"m","instructions":"I","stream":true,"input":[
		{"role":"developer","content":"D"},
		{"type":"message","role":"user","content":[{"type":"input_text","text":"U1"},{"type":"input_image","image_url":"x"},{"type":"input_text","text":"U2"}]},
		{"type":"reasoning","summary":[]},
		{"role":"assistant","content":[{"type":"output_text","text":"A"}]}],
		"tools":[{"type":"function","name":"finish"},{"type":"web_search"}],"metadata":{"timeout_seconds":"7"}}`))
	if e != nil {
		t.Fatal(e)
	}
	var texts []string
	for _, s := range r.Sources() {
		texts = append(texts, r.Messages[s.Message].Role+":"+s.Text)
	}
	if strings.Join(texts, ",") != "system:I,developer:D,user:U1U2" || !r.Stream || r.Model != "m" || r.API != APIResponses ||
		strings.Join(r.Tools, ",") != "finish" || r.TimeoutSeconds != 7 || r.Guarded() {
		t.Fatalf("decoded %+v sources %v", r, texts)
	}
	for body, guarded := range map[string]bool{
		`{"input":"x"}`: false,
		`{"input":[{"role":"user","content":"x"},{"type":"function_call_output","call_id":"c","output":"o"}]}`:                                 true,
		`{"input":[{"role":"user","content":"x"},{"type":"function_call","call_id":"c","name":"finish","arguments":"{}"}]}`:                    true,
		`{"input":[{"type":"function_call_output","call_id":"c","output":"o"},{"role":"user","content":"again"}]}`:                             false,
		`{"instructions":"x","input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"role":"developer","content":"y"}]}`: true,
	} {
		r, e := DecodeResponsesRequest([]byte(body))
		if e != nil || r.Guarded() != guarded {
			t.Errorf("%s: guarded %v (%v), want %v", body, r != nil && r.Guarded(), e, guarded)
		}
	}
	for body, code := range map[string]string{
		`[]`: "invalid_json", `null`: "invalid_json", `{`: "invalid_json", `{}`: "invalid_input", `{"input":[]}`: "invalid_input",
		`{"input":7}`: "invalid_input", `{"input":[1]}`: "invalid_input", `{"input":[{"role":7}]}`: "invalid_input",
		`{"input":[{"role":"user","content":[{"type":"input_text"}]}]}`: "invalid_input", `{"input":"x","model":1}`: "invalid_json",
		`{"input":"x","tools":{}}`: "invalid_json", `{"input":"x","metadata":{"timeout_seconds":"-1"}}`: "invalid_metadata",
	} {
		if _, e := DecodeResponsesRequest([]byte(body)); e == nil || e.Status != 400 || e.Code != code {
			t.Errorf("%s: error %+v, want 400 %s", body, e, code)
		}
	}
}

func TestResponseStreamEvents(t *testing.T) {
	req := &ChatRequest{API: APIResponses, Model: "m"}
	calls := WithCallIDs(fleetCalls(t))
	body := string(ResponseStream(ResponseState{ID: "resp_1", CreatedAt: 5, Status: StatusCompleted, CompletedAt: 5, Out: &Reply{Calls: calls}}, req))
	seq := 0
	var args string
	for ev := range strings.SplitSeq(strings.TrimSuffix(body, "\n\n"), "\n\n") {
		lines := strings.Split(ev, "\n")
		typ, ok1 := strings.CutPrefix(lines[0], "event: ")
		data, ok2 := strings.CutPrefix(lines[len(lines)-1], "data: ")
		var v struct {
			Type           string `json:"type"`
			SequenceNumber int    `json:"sequence_number"`
			Delta          string `json:"delta"`
			Arguments      string `json:"arguments"`
			ItemID         string `json:"item_id"`
		}
		if len(lines) != 2 || !ok1 || !ok2 || json.Unmarshal([]byte(data), &v) != nil || v.Type != typ || v.SequenceNumber != seq {
			t.Fatalf("event %d: %q", seq, ev)
		}
		seq++
		switch typ {
		case "response.function_call_arguments.delta":
			args += v.Delta
		case "response.function_call_arguments.done":
			if args != v.Arguments || !strings.HasPrefix(v.ItemID, "fc_") {
				t.Fatalf("deltas %q != done %q", args, v.Arguments)
			}
			args = ""
		}
	}
	if seq != 3+4*len(calls) || !strings.Contains(body, `"type":"response.completed","sequence_number"`) && !strings.Contains(body, `event: response.completed`) {
		t.Fatalf("%d events", seq)
	}
	var done struct {
		Response struct {
			Status string `json:"status"`
			Output []struct {
				CallID string `json:"call_id"`
			} `json:"output"`
		} `json:"response"`
	}
	last := body[strings.LastIndex(body, "data: ")+6:]
	if json.Unmarshal([]byte(last), &done) != nil || done.Response.Status != "completed" || len(done.Response.Output) != len(calls) ||
		done.Response.Output[0].CallID != calls[0].ID {
		t.Fatalf("completed event %s", last)
	}
}

// A text reply (the re-execution guard's) is one assistant message item with one output_text part, in the
// object and as OpenAI streams it.
func TestResponseText(t *testing.T) {
	req := &ChatRequest{API: APIResponses, Model: "m"}
	text := strings.Repeat("answer ", 1000) // two delta fragments
	var obj struct {
		Status string `json:"status"`
		Output []struct {
			Type, ID, Status, Role string
			Content                []struct{ Type, Text string }
		} `json:"output"`
	}
	done := ResponseState{ID: "resp_abc", CreatedAt: 5, Status: StatusCompleted, CompletedAt: 6, Out: &Reply{Text: &text}}
	if err := json.Unmarshal(done.Object(req), &obj); err != nil {
		t.Fatal(err)
	}
	if o := obj.Output; obj.Status != "completed" || len(o) != 1 || o[0].Type != "message" || o[0].ID != "msg_abc" || o[0].Role != "assistant" ||
		o[0].Status != "completed" || len(o[0].Content) != 1 || o[0].Content[0].Type != "output_text" || o[0].Content[0].Text != text {
		t.Fatalf("%+v", obj)
	}
	var types []string
	var deltas string
	for ev := range strings.SplitSeq(strings.TrimSuffix(string(ResponseStream(done, req)), "\n\n"), "\n\n") {
		var v struct{ Type, Delta string }
		data := ev[strings.Index(ev, "data: ")+6:]
		if err := json.Unmarshal([]byte(data), &v); err != nil {
			t.Fatal(err)
		}
		types = append(types, v.Type)
		if v.Type == "response.output_text.delta" {
			deltas += v.Delta
		}
	}
	want := "response.created response.in_progress response.output_item.added response.content_part.added " +
		"response.output_text.delta response.output_text.delta response.output_text.done response.content_part.done " +
		"response.output_item.done response.completed"
	if strings.Join(types, " ") != want || deltas != text {
		t.Fatalf("events %v, deltas %d bytes", types, len(deltas))
	}
}

// The Response object echoes the request's settings as sent, OpenAI's defaults for the others, in the
// order of OpenAI's object; a failed response carries its error and no usage.
func TestResponseObjectEchoesSettings(t *testing.T) {
	req, e := DecodeResponsesRequest([]byte(`{"model":"m","input":"x","instructions":"I","temperature":0.2,"top_p":null,` +
		`"tools":[{"type":"function","name":"finish","parameters":{}}],"tool_choice":{"type":"function","name":"finish"},` +
		`"metadata":{"k":"v"},"parallel_tool_calls":false,"store":false,"user":"u1","max_output_tokens":100,"text":{"format":{"type":"text"},"verbosity":"low"}}`))
	if e != nil {
		t.Fatal(e)
	}
	got := string(ResponseState{ID: "resp_1", CreatedAt: 5, Status: StatusCompleted, CompletedAt: 6, Out: &Reply{}}.Object(req))
	want := `{"id":"resp_1","object":"response","created_at":5,"status":"completed","background":false,"completed_at":6,"error":null,` +
		`"incomplete_details":null,"instructions":"I","max_output_tokens":100,"max_tool_calls":null,"metadata":{"k":"v"},"model":"m",` +
		`"output":[],"parallel_tool_calls":false,"previous_response_id":null,"prompt_cache_key":null,"reasoning":{"effort":null,"summary":null},` +
		`"safety_identifier":null,"service_tier":"default","store":false,"temperature":0.2,"text":{"format":{"type":"text"},"verbosity":"low"},` +
		`"tool_choice":{"type":"function","name":"finish"},"tools":[{"type":"function","name":"finish","parameters":{}}],"top_logprobs":0,"top_p":1,` +
		`"truncation":"disabled","usage":{"input_tokens":0,"input_tokens_details":{"cached_tokens":0},"output_tokens":0,` +
		`"output_tokens_details":{"reasoning_tokens":0},"total_tokens":0},"user":"u1"}`
	if got != want {
		t.Fatalf("object\n got  %s\n want %s", got, want)
	}
	if req.Response.Store || req.ToolChoice.Function != "finish" {
		t.Fatalf("store %v, tool_choice %+v", req.Response.Store, req.ToolChoice)
	}
	failed := string(ResponseFailedStream(ResponseState{ID: "resp_1", CreatedAt: 5, Status: StatusFailed,
		Err: NewError(422, "nonzero_exit", "block 1/1: non-zero exit (code 3): boom")}, req))
	last := failed[strings.LastIndex(failed, "event: "):]
	if !strings.HasPrefix(last, "event: response.failed\n") || !strings.Contains(last, `"status":"failed"`) ||
		!strings.Contains(last, `"error":{"code":"nonzero_exit","message":"block 1/1: non-zero exit (code 3): boom"}`) ||
		!strings.Contains(last, `"usage":null`) || strings.Count(failed, "event: ") != 3 {
		t.Fatalf("failed stream:\n%s", failed)
	}
	for body, field := range map[string]string{
		`{"input":"x","temperature":"hot"}`: "temperature", `{"input":"x","metadata":[]}`: "metadata",
		`{"input":"x","store":1}`: "store", `{"input":"x","previous_response_id":7}`: "previous_response_id",
	} {
		if _, e := DecodeResponsesRequest([]byte(body)); e == nil || e.Status != 400 || !strings.Contains(e.Message, `"`+field+`"`) {
			t.Errorf("%s: %+v", body, e)
		}
	}
	if _, e := DecodeResponsesRequest([]byte(`{"input":"x","background":true,"store":false}`)); e == nil || e.Status != 400 {
		t.Errorf("background without store: %+v", e)
	}
}

// Input items as input_items lists them: a string input is one user message with an input_text part;
// items keep their ids or get one by type; a message's string content becomes one part.
func TestInputItems(t *testing.T) {
	r, e := DecodeResponsesRequest([]byte(`{"input":"hello"}`))
	if e != nil || len(r.Response.Items) != 1 || !strings.Contains(string(r.Response.Items[0]), `"content":[{"text":"hello","type":"input_text"}]`) {
		t.Fatalf("%v %s", e, r.Response.Items)
	}
	r, _ = DecodeResponsesRequest([]byte(`{"input":[{"role":"user","content":"a"},{"type":"function_call_output","call_id":"c","output":"o"},` +
		`{"id":"msg_mine","type":"message","role":"assistant","content":"b"}]}`))
	var got []struct {
		ID, Type, Role string
		Content        any
	}
	for _, it := range r.Response.Items {
		var v struct {
			ID, Type, Role string
			Content        any
		}
		json.Unmarshal(it, &v)
		got = append(got, v)
	}
	if len(got) != 3 || !strings.HasPrefix(got[0].ID, "msg_") || got[0].Type != "message" || !strings.HasPrefix(got[1].ID, "fco_") ||
		got[2].ID != "msg_mine" || !strings.Contains(string(r.Response.Items[2]), `"type":"output_text"`) {
		t.Fatalf("%+v", got)
	}
}
