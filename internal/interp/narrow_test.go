package interp

import (
	"errors"
	"reflect"
	"testing"
)

// operatorExposure is what the operator exposed (Exposed's output) — trip2g's envscope_test fixture minus
// UNRELATED, which the operator did not expose.
var operatorExposure = []string{"GH_TOKEN=c", "KRISP_BASE_URL=b", "KRISP_TOKEN=a"}

func TestNarrow(t *testing.T) {
	for _, tc := range []struct {
		name, bag string
		want      []string
	}{
		{"no declaration keeps the operator's exposure", `{"depth":1}`, operatorExposure},
		{"empty lists declare nothing", `{"env_passthrough":[],"env_prefix":[]}`, operatorExposure},
		{"null declares nothing", `{"env_passthrough":null}`, operatorExposure},
		{"no bag", ``, operatorExposure},
		{"a bag that is not an object", `[1]`, operatorExposure},
		{"a name narrows", `{"env_passthrough":["KRISP_TOKEN"]}`, []string{"KRISP_TOKEN=a"}},
		{"a declaration cannot widen", `{"env_passthrough":["KRISP_TOKEN","UNRELATED","SEAL_KEY"]}`, []string{"KRISP_TOKEN=a"}},
		{"a prefix narrows", `{"env_prefix":["KRISP_"]}`, []string{"KRISP_BASE_URL=b", "KRISP_TOKEN=a"}},
		{"prefixes of different lengths compose", `{"env_prefix":["KRISP_B"]}`, []string{"KRISP_BASE_URL=b"}},
		{"name and prefix combine", `{"env_passthrough":["GH_TOKEN"],"env_prefix":["KRISP_B"]}`, []string{"GH_TOKEN=c", "KRISP_BASE_URL=b"}},
		{"a declared name absent from the exposure is just absent", `{"env_passthrough":["NOT_SET"]}`, []string{}},
		{"an empty prefix matches nothing", `{"env_prefix":[""]}`, []string{}},
	} {
		got, err := Narrow(operatorExposure, []byte(tc.bag))
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: Narrow = %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
	// An operator that exposed nothing exposes nothing, whatever a role asks.
	if got, _ := Narrow(nil, []byte(`{"env_passthrough":["KRISP_TOKEN"]}`)); len(got) != 0 {
		t.Errorf("empty exposure widened to %q", got)
	}
}

func TestNarrowRefusesMalformedDeclarations(t *testing.T) {
	for _, bag := range []string{`{"env_passthrough":"KRISP_TOKEN"}`, `{"env_prefix":[1]}`, `{"env_prefix":{"a":1}}`} {
		_, err := Narrow(operatorExposure, []byte(bag))
		var be *BagEnvError
		if !errors.As(err, &be) {
			t.Errorf("%s: err = %v, want *BagEnvError", bag, err)
		}
	}
}
