package hub

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"
)

// goldenFile encodes v as every golden file of this package is written (indented JSON, with <, > and &
// kept readable) and returns it beside the file at path. Under -update it rewrites the file instead and
// returns want == nil.
func goldenFile(t *testing.T, path string, v any) (got, want []byte) {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	if *updateGolden {
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes(), nil
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), want
}

// compareGolden fails the test when v differs from the golden file at path (or rewrites it with -update).
func compareGolden(t *testing.T, path string, v any) {
	t.Helper()
	if got, want := goldenFile(t, path, v); want != nil && !bytes.Equal(got, want) {
		t.Errorf("%s differs (rerun with -update and review the diff):\n%s", path, got)
	}
}

// compareGoldenCalls is compareGolden for a list of recorded calls: it names each call that differs, is
// missing or is new, so that a failure points at the request and not at a line of the file.
func compareGoldenCalls[T any](t *testing.T, path string, got []T) {
	t.Helper()
	gotJSON, want := goldenFile(t, path, got)
	if want == nil || bytes.Equal(gotJSON, want) {
		return
	}
	var wl []T
	if err := json.Unmarshal(want, &wl); err != nil {
		t.Fatalf("%s: %v (rerun with -update)", path, err)
	}
	line := func(v T) string {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(v)
		return string(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
	}
	for i := range max(len(got), len(wl)) {
		switch {
		case i >= len(wl):
			t.Errorf("call %d is not in %s: %s", i, path, line(got[i]))
		case i >= len(got):
			t.Errorf("call %d of %s was not made: %s", i, path, line(wl[i]))
		case line(got[i]) != line(wl[i]):
			t.Errorf("call %d differs:\n got  %s\n want %s", i, line(got[i]), line(wl[i]))
		}
	}
}
