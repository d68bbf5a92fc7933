package openai

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/contract"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata from the current output")

// decoded is the golden form of one request: everything the service derives from it before running.
type decoded struct {
	Error    *goldenError   `json:"error"`
	Request  *goldenRequest `json:"request"`
	Guarded  bool           `json:"guarded"`
	Bag      *string        `json:"bag"`
	BagError *goldenError   `json:"bag_error"`
	Sources  []goldenSource `json:"sources"`
}

type goldenError struct {
	Status  int    `json:"status"`
	Type    string `json:"type"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

type goldenRequest struct {
	Model          string          `json:"model"`
	Stream         bool            `json:"stream"`
	IncludeUsage   bool            `json:"include_usage"`
	Messages       []goldenMessage `json:"messages"`
	Tools          []string        `json:"tools"`
	TimeoutSeconds int             `json:"timeout_seconds"`
	Debug          bool            `json:"debug"`
}

type goldenMessage struct {
	Role         string  `json:"role"`
	Name         string  `json:"name"`
	Text         string  `json:"text"`
	HasToolCalls bool    `json:"has_tool_calls"`
	ToolResult   bool    `json:"tool_result,omitempty"`
	FinishAnswer *string `json:"finish_answer,omitempty"`
}

type goldenSource struct {
	Message int    `json:"message"`
	Text    string `json:"text"`
}

func toGoldenError(e *Error) *goldenError {
	if e == nil {
		return nil
	}
	return &goldenError{Status: e.Status, Type: e.Type(), Code: e.Code, Message: e.Message}
}

func decodeForGolden(body []byte) decoded {
	r, e := DecodeChatRequest(body)
	if e != nil {
		return decoded{Error: toGoldenError(e)}
	}
	d := decoded{Request: &goldenRequest{
		Model: r.Model, Stream: r.Stream, IncludeUsage: r.IncludeUsage, Tools: r.Tools,
		TimeoutSeconds: r.TimeoutSeconds, Debug: r.Debug,
	}}
	for _, m := range r.Messages {
		d.Request.Messages = append(d.Request.Messages, goldenMessage(m))
	}
	d.Guarded = r.Guarded()
	bag, be := r.Bag()
	d.BagError = toGoldenError(be)
	if bag != nil {
		s := string(bag)
		d.Bag = &s
	}
	for _, s := range r.Sources() {
		d.Sources = append(d.Sources, goldenSource{Message: s.Message, Text: s.Text})
	}
	return d
}

func indentJSON(t *testing.T, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// compareGolden compares got with the golden file, or rewrites it under -update.
func compareGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it, then review it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// TestRequestGolden decodes every testdata/requests/*.json body and compares what the service derives
// from it — the decoded request or its 400, the guard condition, the bag and the scanned sources — with
// the reviewed .golden file beside it.
func TestRequestGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/requests/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no request cases: %v", err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		t.Run(name, func(t *testing.T) {
			body, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			compareGolden(t, strings.TrimSuffix(f, ".json")+".golden", indentJSON(t, decodeForGolden(body)))
		})
	}
}

// TestRequestErrorsNameTheField checks the property the golden files encode for every 400 case: the
// status and type are fixed and the message names the offending field.
func TestRequestErrorsNameTheField(t *testing.T) {
	tests := []struct{ file, code, field string }{
		{"err_model_number", "invalid_json", `"model"`},
		{"err_stream_string", "invalid_json", `"stream"`},
		{"err_stream_options_array", "invalid_json", `"stream_options"`},
		{"err_include_usage_string", "invalid_json", `"stream_options.include_usage"`},
		{"err_tools_object", "invalid_json", `"tools"`},
		{"err_tools_entry_string", "invalid_json", `"tools[0]"`},
		{"err_tools_function_string", "invalid_json", `"tools[1].function"`},
		{"err_tools_name_number", "invalid_json", `"tools[0].function.name"`},
		{"err_debug_string", "invalid_json", `"x_codellm_debug"`},
		{"metadata_not_object", "invalid_json", `"metadata"`},
		{"err_messages_absent", "invalid_messages", `"messages"`},
		{"err_messages_null", "invalid_messages", `"messages"`},
		{"err_messages_empty", "invalid_messages", `"messages"`},
		{"err_messages_object", "invalid_messages", `"messages"`},
		{"err_message_string", "invalid_messages", `"messages[1]"`},
		{"err_role_missing", "invalid_messages", `"messages[0].role"`},
		{"err_role_number", "invalid_messages", `"messages[0].role"`},
		{"err_name_number", "invalid_messages", `"messages[0].name"`},
		{"err_content_number", "invalid_messages", `"messages[0].content"`},
		{"err_content_object", "invalid_messages", `"messages[0].content"`},
		{"err_part_string", "invalid_messages", `"messages[0].content[0]"`},
		{"err_part_type_missing", "invalid_messages", `"messages[0].content[0].type"`},
		{"err_part_text_number", "invalid_messages", `"messages[0].content[0].text"`},
		{"err_tool_calls_object", "invalid_messages", `"messages[1].tool_calls"`},
		{"metadata_zero", "invalid_metadata", `"metadata.timeout_seconds"`},
		{"metadata_negative", "invalid_metadata", `"metadata.timeout_seconds"`},
		{"metadata_negative_integer", "invalid_metadata", `"metadata.timeout_seconds"`},
		{"metadata_fraction", "invalid_metadata", `"metadata.timeout_seconds"`},
		{"metadata_float", "invalid_metadata", `"metadata.timeout_seconds"`},
		{"metadata_text", "invalid_metadata", `"metadata.timeout_seconds"`},
		{"metadata_spaces", "invalid_metadata", `"metadata.timeout_seconds"`},
		{"metadata_bool", "invalid_metadata", `"metadata.timeout_seconds"`},
		{"err_invalid_json", "invalid_json", "not valid JSON"},
		{"err_trailing_data", "invalid_json", "not valid JSON"},
		{"err_body_empty", "invalid_json", "not valid JSON"},
		{"err_body_array", "invalid_json", "must be a JSON object"},
		{"err_body_null", "invalid_json", "must be a JSON object"},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			body, err := os.ReadFile("testdata/requests/" + tc.file + ".json")
			if err != nil {
				t.Fatal(err)
			}
			r, e := DecodeChatRequest(body)
			if e == nil {
				t.Fatalf("accepted: %+v", r)
			}
			if r != nil || e.Status != http.StatusBadRequest || e.Type() != "invalid_request_error" || e.Code != tc.code ||
				!strings.Contains(e.Message, tc.field) {
				t.Fatalf("got %d %s %s %q, want 400 invalid_request_error %s naming %s", e.Status, e.Type(), e.Code, e.Message, tc.code, tc.field)
			}
		})
	}
}

func TestBagErrors(t *testing.T) {
	for _, tc := range []struct{ file, msg string }{
		{"bag_invalid", `the "fleet_input" message (messages[0]) is not valid JSON: unexpected end of JSON input`},
		{"bag_empty_content", `the "fleet_input" message (messages[0]) is not valid JSON: unexpected end of JSON input`},
		{"bag_two", `messages[0] and messages[1] are both named "fleet_input"; a request carries at most one delivery bag`},
	} {
		body, err := os.ReadFile("testdata/requests/" + tc.file + ".json")
		if err != nil {
			t.Fatal(err)
		}
		r, e := DecodeChatRequest(body)
		if e != nil {
			t.Fatalf("%s: decode: %v", tc.file, e)
		}
		bag, e := r.Bag()
		if e == nil || bag != nil || e.Status != 400 || e.Code != "invalid_fleet_input" || e.Message != tc.msg {
			t.Errorf("%s: Bag() = %q, %+v; want 400 invalid_fleet_input %q", tc.file, bag, e, tc.msg)
		}
	}
}

func TestTimeoutClamp(t *testing.T) {
	const limit = 300 * time.Second
	for _, tc := range []struct {
		seconds int
		want    time.Duration
	}{{0, limit}, {2, 2 * time.Second}, {300, limit}, {301, limit}, {MaxTimeoutSeconds, limit}} {
		r := &ChatRequest{TimeoutSeconds: tc.seconds}
		if got := r.Timeout(limit); got != tc.want {
			t.Errorf("Timeout(%d s) = %v, want %v", tc.seconds, got, tc.want)
		}
	}
}

// The guard's text is the answer of the last finish call after the last user message, in both APIs; a
// conversation without one (or with an empty one) gets contract.GuardAnswer.
func TestGuardAnswer(t *testing.T) {
	finish := func(answer string) string {
		return `{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"write_note","arguments":"{}"}},` +
			`{"id":"d","type":"function","function":{"name":"finish","arguments":` + strconv.Quote(`{"answer":"`+answer+`"}`) + `}}]}`
	}
	for body, want := range map[string]string{
		`{"messages":[{"role":"user","content":"x"},` + finish("done") + `,{"role":"tool","content":"ok"}]}`:                                   "done",
		`{"messages":[` + finish("old") + `,{"role":"user","content":"x"},` + finish("new") + `]}`:                                             "new",
		`{"messages":[{"role":"user","content":"x"},` + finish("") + `]}`:                                                                      contract.GuardAnswer,
		`{"messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"function":{"name":"finish","arguments":"{"}}]}]}`:      contract.GuardAnswer,
		`{"messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"function":{"name":"write_note","arguments":"{}"}}]}]}`: contract.GuardAnswer,
	} {
		r, e := DecodeChatRequest([]byte(body))
		if e != nil || !r.Guarded() || r.GuardAnswer() != want {
			t.Errorf("%s: %v guarded %v answer %q, want %q", body, e, r != nil && r.Guarded(), r.GuardAnswer(), want)
		}
	}
	r, e := DecodeResponsesRequest([]byte(`{"input":[{"role":"user","content":"x"},` +
		`{"type":"function_call","call_id":"c","name":"finish","arguments":"{\"answer\":\"wrote\"}"},{"type":"function_call_output","call_id":"c","output":"wrote"}]}`))
	if e != nil || !r.Guarded() || r.GuardAnswer() != "wrote" {
		t.Fatalf("responses: %v %+v", e, r)
	}
}

// tool_choice: "auto" and "required" are honoured as they are; a forced finish is honoured, another
// function refused; "none" only where the guard answers; allowed_tools narrows the offered tools; hosted
// tool types are refused — in both APIs' shapes.
func TestToolChoice(t *testing.T) {
	chat := func(tc string) string {
		return `{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"write_note"}},` +
			`{"type":"function","function":{"name":"finish"}}],"tool_choice":` + tc + `}`
	}
	for tc, want := range map[string]string{
		`"auto"`: "auto ok", `"required"`: "required ok", `null`: "auto ok",
		`{"type":"function","function":{"name":"finish"}}`:     "auto finish ok",
		`{"type":"function","function":{"name":"write_note"}}`: "invalid_tool_choice",
		`"none"`:                 "invalid_tool_choice",
		`"sometimes"`:            "invalid_tool_choice",
		`{"type":"file_search"}`: "invalid_tool_choice",
		`{"type":"allowed_tools","allowed_tools":{"mode":"required","tools":[{"type":"function","function":{"name":"finish"}}]}}`: "required ok [finish]",
	} {
		r, e := DecodeChatRequest([]byte(chat(tc)))
		got := ""
		switch {
		case e != nil:
			got = e.Code
		case r.ToolChoice.Check(false) != nil:
			got = r.ToolChoice.Check(false).Code
		default:
			got = strings.Join(strings.Fields(r.ToolChoice.Mode+" "+r.ToolChoice.Function+" ok"), " ")
			if r.ToolChoice.Allowed != nil {
				got += " " + fmt.Sprint(r.Tools)
			}
		}
		if got != want {
			t.Errorf("tool_choice %s: %s, want %s", tc, got, want)
		}
	}
	r, _ := DecodeChatRequest([]byte(chat(`"none"`)))
	if r.ToolChoice.Check(true) != nil || r.ToolChoice.Requires() {
		t.Error(`"none" must be honoured by the guard's text`)
	}
	r, e := DecodeResponsesRequest([]byte(`{"input":"x","tool_choice":{"type":"allowed_tools","mode":"auto","tools":[{"type":"function","name":"write_note"}]}}`))
	if e != nil || fmt.Sprint(r.Tools) != "[write_note]" || r.ToolChoice.Requires() || string(r.ToolChoice.Raw) == "" {
		t.Fatalf("%v %+v", e, r)
	}
	if _, e := DecodeResponsesRequest([]byte(`{"input":"x","tool_choice":{"type":"function","function":{"name":"finish"}}}`)); e == nil || e.Code != "invalid_tool_choice" {
		t.Fatalf("a chat-shaped forced function on the Responses API: %+v", e)
	}
}
