package openai

import (
	"net/http/httptest"
	"os"
	"testing"
)

func BenchmarkDecodeChatRequest(b *testing.B) {
	body, err := os.ReadFile("testdata/requests/fleet_15_3.json")
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		r, e := DecodeChatRequest(body)
		if e != nil {
			b.Fatal(e)
		}
		if _, e := r.Bag(); e != nil {
			b.Fatal(e)
		}
		_ = r.Sources()
	}
}

func BenchmarkCompletion(b *testing.B) {
	calls := fleetCalls(b)
	b.ReportAllocs()
	for b.Loop() {
		_ = Completion(specID, specCreated, "codellm", calls, nil)
	}
}

func BenchmarkWriteStream(b *testing.B) {
	calls := fleetCalls(b)
	b.ReportAllocs()
	for b.Loop() {
		if err := WriteStream(httptest.NewRecorder(), specID, specCreated, "codellm", calls, true, nil); err != nil {
			b.Fatal(err)
		}
	}
}
