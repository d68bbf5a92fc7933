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
	body := string(ResponseStream("resp_1", 5, req, &Reply{Calls: calls}))
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
	if err := json.Unmarshal(Response("resp_abc", 5, req, &Reply{Text: &text}), &obj); err != nil {
		t.Fatal(err)
	}
	if o := obj.Output; obj.Status != "completed" || len(o) != 1 || o[0].Type != "message" || o[0].ID != "msg_abc" || o[0].Role != "assistant" ||
		o[0].Status != "completed" || len(o[0].Content) != 1 || o[0].Content[0].Type != "output_text" || o[0].Content[0].Text != text {
		t.Fatalf("%+v", obj)
	}
	var types []string
	var deltas string
	for ev := range strings.SplitSeq(strings.TrimSuffix(string(ResponseStream("resp_abc", 5, req, &Reply{Text: &text})), "\n\n"), "\n\n") {
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
