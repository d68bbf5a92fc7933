package interp

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// FuzzLoad: the strict loader never panics, fails only with a *LoadError, and whatever it accepts is
// self-consistent and survives a JSON round trip unchanged.
func FuzzLoad(f *testing.F) {
	f.Add(string(builtinJSON))
	f.Add(entry(`{"name":"ruby","cmd":["ruby"],"code_block_labels":["rb"],"ext":".rb","env":[{"name":"A","value":"1"}]}`))
	f.Add(entry(`{"name":"ruby","cmd":["ruby"],"cmd":["x"],"code_block_labels":["rb"],"ext":".rb"}`))
	f.Add(`{"interpreters":[{"name":"a","cmd":["/x"],"code_block_labels":["a"],"ext":".a","env":[{"name":"A","value":"1","value":"2"}]}]}`)
	f.Add(`{"interpreters":[[{"a":1,"a":2}]]}`)
	f.Add(`{"interpreters":[]} x`)
	f.Add(`{"interpreters":[{"name":"a"},{"name":"b","Cmd":[]}],"interpreters":[]}`)
	f.Fuzz(func(t *testing.T, data string) {
		r, err := Load(strings.NewReader(data))
		if err != nil {
			var le *LoadError
			if r != nil || !errors.As(err, &le) || !errors.Is(err, ErrInvalidRegistry) {
				t.Fatalf("bad failure: %v, %T %v", r, err, err)
			}
			return
		}
		list := r.Interpreters()
		if len(list) == 0 || !slices.IsSorted(r.Labels()) {
			t.Fatalf("accepted an inconsistent registry: %+v", list)
		}
		n := 0
		for _, in := range list {
			for _, l := range in.Labels {
				n++
				got, ok := r.Lookup(l)
				if !ok || got.Name != in.Name {
					t.Fatalf("label %q does not resolve to %q", l, in.Name)
				}
			}
			for _, e := range in.Env {
				if slices.Contains(Reserved, e.Name) {
					t.Fatalf("reserved env %s accepted", e.Name)
				}
			}
		}
		if n != len(r.Labels()) {
			t.Fatalf("label count %d vs %d", n, len(r.Labels()))
		}
		out, err := json.Marshal(map[string]any{"interpreters": list})
		if err != nil {
			t.Fatal(err)
		}
		again, err := Load(strings.NewReader(string(out)))
		if err != nil || !reflect.DeepEqual(again.Interpreters(), list) {
			t.Fatalf("round trip: %v", err)
		}
	})
}
