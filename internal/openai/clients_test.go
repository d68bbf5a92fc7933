package openai

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"sync"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
	goopenai "github.com/sashabaranov/go-openai"
)

// fakeService is an httptest server that decodes each request with DecodeChatRequest and answers
// with Completion/WriteStream bytes, or with a fixed error — the wire half of codellm, without running
// code. It records what it decoded so tests can check the clients' requests too.
type fakeService struct {
	*httptest.Server
	calls []ToolCall
	extra map[string]any
	fail  *Error

	mu   sync.Mutex
	seen []*ChatRequest
}

func newFakeService(t *testing.T, calls []ToolCall, extra map[string]any, fail *Error) *fakeService {
	f := &fakeService{calls: calls, extra: extra, fail: fail}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeService) serve(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/v1/models" && r.Method == http.MethodGet:
		writeBody(w, http.StatusOK, Models())
		return
	case r.URL.Path != "/v1/chat/completions":
		WriteError(w, NewError(http.StatusNotFound, "not_found", "no route for %s %s", r.Method, r.URL.Path))
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		WriteError(w, NewError(http.StatusBadRequest, "invalid_json", "reading the body: %v", err))
		return
	}
	req, e := DecodeChatRequest(body)
	if e != nil {
		WriteError(w, e)
		return
	}
	f.mu.Lock()
	f.seen = append(f.seen, req)
	f.mu.Unlock()
	if f.fail != nil {
		WriteError(w, f.fail)
		return
	}
	id, created := NewID(), time.Now().Unix()
	if req.Stream {
		_ = WriteStream(w, id, created, req.Model, f.calls, req.IncludeUsage, f.extra)
		return
	}
	writeBody(w, http.StatusOK, Completion(id, created, req.Model, f.calls, f.extra))
}

func (f *fakeService) lastRequest(t *testing.T) *ChatRequest {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.seen) == 0 {
		t.Fatal("the service decoded no request")
	}
	return f.seen[len(f.seen)-1]
}

// checkFleetRequest asserts that a client's rendering of the §15.3 request decodes as codellm needs it.
func checkFleetRequest(t *testing.T, r *ChatRequest, stream, includeUsage bool) {
	t.Helper()
	if r.Model != "codellm" || r.Stream != stream || r.IncludeUsage != includeUsage || r.Guarded() {
		t.Errorf("decoded %+v", r)
	}
	if want := []string{"search", "read_note", "write_note", "patch_note", "finish"}; !reflect.DeepEqual(r.Tools, want) {
		t.Errorf("tools %v", r.Tools)
	}
	bag, e := r.Bag()
	if e != nil || len(bag) == 0 || !json.Valid(bag) {
		t.Errorf("bag %q, %v", bag, e)
	}
	if src := r.Sources(); len(src) != 2 || src[0].Message != 0 || src[1].Message != 2 || src[1].Text != "Begin." {
		t.Errorf("sources %+v", src)
	}
}

// fleetRequest is the §15.3 request as stored in testdata.
type fleetRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role, Name, Content string
	} `json:"messages"`
	Tools []struct {
		Function struct {
			Name        string         `json:"name"`
			Description string         `json:"description"`
			Parameters  map[string]any `json:"parameters"`
		} `json:"function"`
	} `json:"tools"`
	MaxCompletionTokens int `json:"max_completion_tokens"`
}

func loadFleetRequest(t *testing.T) ([]byte, fleetRequest) {
	t.Helper()
	raw, err := os.ReadFile("testdata/requests/fleet_15_3.json")
	if err != nil {
		t.Fatal(err)
	}
	var fr fleetRequest
	if err := json.Unmarshal(raw, &fr); err != nil {
		t.Fatal(err)
	}
	return raw, fr
}

type rebuilt struct{ ID, Name, Arguments string }

func want(calls []ToolCall) []rebuilt {
	out := make([]rebuilt, len(calls))
	for i, c := range calls {
		out[i] = rebuilt(c)
	}
	return out
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // only detects hangs
	t.Cleanup(cancel)
	return ctx
}

// TestGoOpenAIClient drives fleet's client, github.com/sashabaranov/go-openai, against the bytes this
// package produces: the plain completion and the stream (with and without include_usage) rebuild the
// same calls, the §13 debug object does not disturb it, and errors surface with their code.
func TestGoOpenAIClient(t *testing.T) {
	calls := fleetCalls(t)
	raw, _ := loadFleetRequest(t)
	for _, extra := range []map[string]any{nil, debugExtra()} {
		svc := newFakeService(t, calls, extra, nil)
		cfg := goopenai.DefaultConfig("test-key")
		cfg.BaseURL = svc.URL + "/v1"
		client := goopenai.NewClientWithConfig(cfg)
		ctx := testContext(t)

		var req goopenai.ChatCompletionRequest
		if err := json.Unmarshal(raw, &req); err != nil {
			t.Fatal(err)
		}
		resp, err := client.CreateChatCompletion(ctx, req)
		if err != nil {
			t.Fatalf("CreateChatCompletion: %v", err)
		}
		checkFleetRequest(t, svc.lastRequest(t), false, false)
		if len(resp.Choices) != 1 || resp.Choices[0].FinishReason != goopenai.FinishReasonToolCalls ||
			resp.Choices[0].Message.Role != "assistant" || resp.Model != "codellm" || resp.Usage.TotalTokens != 0 {
			t.Errorf("response %+v", resp)
		}
		var got []rebuilt
		for _, tc := range resp.Choices[0].Message.ToolCalls {
			if tc.Type != goopenai.ToolTypeFunction {
				t.Errorf("type %q", tc.Type)
			}
			got = append(got, rebuilt{tc.ID, tc.Function.Name, tc.Function.Arguments})
		}
		if !reflect.DeepEqual(got, want(calls)) {
			t.Errorf("go-openai rebuilt %+v, want %+v", got, want(calls))
		}

		for _, includeUsage := range []bool{false, true} {
			sreq := req
			sreq.Stream = true
			if includeUsage {
				sreq.StreamOptions = &goopenai.StreamOptions{IncludeUsage: true}
			}
			stream, err := client.CreateChatCompletionStream(ctx, sreq)
			if err != nil {
				t.Fatalf("CreateChatCompletionStream: %v", err)
			}
			// Accumulate tool-call deltas by index, as go-openai users (fleet included) do.
			byIndex := map[int]*rebuilt{}
			var order []int
			var finish goopenai.FinishReason
			usageSeen := false
			for {
				chunk, err := stream.Recv()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatalf("Recv: %v", err)
				}
				if chunk.Usage != nil {
					usageSeen = true
				}
				for _, ch := range chunk.Choices {
					if ch.FinishReason != "" {
						finish = ch.FinishReason
					}
					for _, d := range ch.Delta.ToolCalls {
						if d.Index == nil {
							t.Fatal("tool call delta without index")
						}
						r, ok := byIndex[*d.Index]
						if !ok {
							r = &rebuilt{}
							byIndex[*d.Index] = r
							order = append(order, *d.Index)
						}
						if d.ID != "" {
							r.ID = d.ID
						}
						r.Name += d.Function.Name
						r.Arguments += d.Function.Arguments
					}
				}
			}
			stream.Close()
			checkFleetRequest(t, svc.lastRequest(t), true, includeUsage)
			var sgot []rebuilt
			for _, i := range order {
				sgot = append(sgot, *byIndex[i])
			}
			if !reflect.DeepEqual(sgot, want(calls)) || finish != goopenai.FinishReasonToolCalls || usageSeen != includeUsage {
				t.Errorf("go-openai stream (usage %v) rebuilt %+v finish %q usage %v", includeUsage, sgot, finish, usageSeen)
			}
		}

		models, err := client.ListModels(ctx)
		if err != nil || len(models.Models) != 1 || models.Models[0].ID != "codellm" || models.Models[0].OwnedBy != "codellm" {
			t.Errorf("ListModels: %+v, %v", models, err)
		}
	}

	svc := newFakeService(t, calls, nil, NewError(422, "bad_output", "%s", "bad output: change[0]: missing path"))
	cfg := goopenai.DefaultConfig("test-key")
	cfg.BaseURL = svc.URL + "/v1"
	_, err := goopenai.NewClientWithConfig(cfg).CreateChatCompletion(testContext(t), goopenai.ChatCompletionRequest{
		Model: "codellm", Messages: []goopenai.ChatCompletionMessage{{Role: "user", Content: "```bash\necho hi\n```"}}})
	var apiErr *goopenai.APIError
	if !errors.As(err, &apiErr) || apiErr.HTTPStatusCode != 422 || apiErr.Code != "bad_output" ||
		apiErr.Type != "code_execution_error" || apiErr.Message != "bad output: change[0]: missing path" {
		t.Errorf("go-openai error: %#v", err)
	}
}

// TestOpenAIGoClient drives github.com/openai/openai-go/v3 the same way, streaming through its
// ChatCompletionAccumulator.
func TestOpenAIGoClient(t *testing.T) {
	calls := fleetCalls(t)
	_, fr := loadFleetRequest(t)
	params := oai.ChatCompletionNewParams{Model: fr.Model, MaxCompletionTokens: oai.Int(int64(fr.MaxCompletionTokens))}
	for _, m := range fr.Messages {
		switch {
		case m.Role == "system" && m.Name != "":
			params.Messages = append(params.Messages, oai.ChatCompletionMessageParamUnion{OfSystem: &oai.ChatCompletionSystemMessageParam{
				Name: oai.String(m.Name), Content: oai.ChatCompletionSystemMessageParamContentUnion{OfString: oai.String(m.Content)}}})
		case m.Role == "system":
			params.Messages = append(params.Messages, oai.SystemMessage(m.Content))
		default:
			params.Messages = append(params.Messages, oai.UserMessage(m.Content))
		}
	}
	for _, tool := range fr.Tools {
		params.Tools = append(params.Tools, oai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name: tool.Function.Name, Description: oai.String(tool.Function.Description), Parameters: tool.Function.Parameters}))
	}

	for _, extra := range []map[string]any{nil, debugExtra()} {
		svc := newFakeService(t, calls, extra, nil)
		client := oai.NewClient(option.WithBaseURL(svc.URL+"/v1/"), option.WithAPIKey("test-key"), option.WithMaxRetries(0))
		ctx := testContext(t)

		resp, err := client.Chat.Completions.New(ctx, params)
		if err != nil {
			t.Fatalf("Chat.Completions.New: %v", err)
		}
		checkFleetRequest(t, svc.lastRequest(t), false, false)
		if len(resp.Choices) != 1 || resp.Choices[0].FinishReason != "tool_calls" || resp.Model != "codellm" ||
			resp.Usage.TotalTokens != 0 || resp.Choices[0].Message.Content != "" {
			t.Errorf("response %+v", resp)
		}
		if _, ok := resp.JSON.ExtraFields["x_codellm_debug"]; ok != (extra != nil) {
			t.Errorf("x_codellm_debug present = %v", ok)
		}
		var got []rebuilt
		for _, tc := range resp.Choices[0].Message.ToolCalls {
			if tc.Type != "function" {
				t.Errorf("type %q", tc.Type)
			}
			got = append(got, rebuilt{tc.ID, tc.Function.Name, tc.Function.Arguments})
		}
		if !reflect.DeepEqual(got, want(calls)) {
			t.Errorf("openai-go rebuilt %+v, want %+v", got, want(calls))
		}

		for _, includeUsage := range []bool{false, true} {
			sparams := params
			if includeUsage {
				sparams.StreamOptions = oai.ChatCompletionStreamOptionsParam{IncludeUsage: oai.Bool(true)}
			}
			stream := client.Chat.Completions.NewStreaming(ctx, sparams)
			acc := oai.ChatCompletionAccumulator{}
			var finished []rebuilt
			debugOnFinish, usageSeen := false, false
			for stream.Next() {
				chunk := stream.Current()
				if chunk.JSON.Usage.Valid() {
					usageSeen = len(chunk.Choices) == 0 && chunk.Usage.TotalTokens == 0
				}
				if !acc.AddChunk(chunk) {
					t.Fatalf("accumulator rejected chunk %s", chunk.RawJSON())
				}
				if tc, ok := acc.JustFinishedToolCall(); ok {
					finished = append(finished, rebuilt{tc.ID, tc.Name, tc.Arguments})
				}
				if _, ok := chunk.JSON.ExtraFields["x_codellm_debug"]; ok {
					debugOnFinish = len(chunk.Choices) == 1 && chunk.Choices[0].FinishReason == "tool_calls"
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatalf("stream: %v", err)
			}
			stream.Close()
			checkFleetRequest(t, svc.lastRequest(t), true, includeUsage)
			var sgot []rebuilt
			for _, tc := range acc.Choices[0].Message.ToolCalls {
				sgot = append(sgot, rebuilt{tc.ID, tc.Function.Name, tc.Function.Arguments})
			}
			if !reflect.DeepEqual(sgot, want(calls)) || acc.Choices[0].FinishReason != "tool_calls" || acc.Model != "codellm" {
				t.Errorf("openai-go stream (usage %v) rebuilt %+v finish %q", includeUsage, sgot, acc.Choices[0].FinishReason)
			}
			if !reflect.DeepEqual(finished, want(calls)) {
				t.Errorf("JustFinishedToolCall saw %+v", finished)
			}
			if debugOnFinish != (extra != nil) {
				t.Errorf("x_codellm_debug on the finish chunk = %v, want %v", debugOnFinish, extra != nil)
			}
			if usageSeen != includeUsage || acc.Usage.TotalTokens != 0 {
				t.Errorf("usage chunk seen = %v, want %v (total %d)", usageSeen, includeUsage, acc.Usage.TotalTokens)
			}
		}

		page, err := client.Models.List(ctx)
		if err != nil || len(page.Data) != 1 || page.Data[0].ID != "codellm" || page.Data[0].OwnedBy != "codellm" {
			t.Errorf("Models.List: %+v, %v", page, err)
		}
	}

	svc := newFakeService(t, calls, nil, NewError(422, "missing_tool", "%s",
		`the role needs tool "patch_note" but the request's tools do not offer it (offered: finish)`))
	client := oai.NewClient(option.WithBaseURL(svc.URL+"/v1/"), option.WithAPIKey("test-key"), option.WithMaxRetries(0))
	_, err := client.Chat.Completions.New(testContext(t), params)
	var apiErr *oai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 422 || apiErr.Code != "missing_tool" || apiErr.Type != "code_execution_error" ||
		apiErr.Message != `the role needs tool "patch_note" but the request's tools do not offer it (offered: finish)` {
		t.Errorf("openai-go error: %#v", err)
	}
}
