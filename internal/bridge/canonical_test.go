package bridge

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"testing"
)

// Vectors of spec §4.3, produced by Node 20 JSON.stringify(JSON.parse(input)).
func TestCanonicalVectors(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"C1", `{"b":1,"a":2,"10":3,"2":4,"x":"<&>"}`, `{"2":4,"10":3,"b":1,"a":2,"x":"<&>"}`},
		{"C2", `{"b":0,"4294967295":1,"4294967294":2,"01":3,"1":4,"-1":5,"a":6}`, `{"1":4,"4294967294":2,"b":0,"4294967295":1,"01":3,"-1":5,"a":6}`},
		{"C3", `{"n":1.0,"m":1e21,"k":0.0000001,"j":0.000001,"z":-0,"big":12345678901234567890,"e":123e-20,"f":1E400}`,
			`{"n":1,"m":1e+21,"k":1e-7,"j":0.000001,"z":0,"big":12345678901234567000,"e":1.23e-18,"f":null}`},
		{"C5", `{"a":1,"a":2,"b":3}`, `{"a":2,"b":3}`},
		{"C6", `{"nested":{"z":[{"2":"x","1":"y"}],"y":null},"t":true}`, `{"nested":{"z":[{"1":"y","2":"x"}],"y":null},"t":true}`},
		{"C7", `{}`, `{}`},
		{"whitespace", " {\n\"a\" : [ 1 , 2 ] ,\t\"b\":{ } } ", `{"a":[1,2],"b":{}}`},
		{"dup-nested-first-position", `{"a":{"x":1},"b":2,"a":{"y":2}}`, `{"a":{"y":2},"b":2}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Canonicalize([]byte(c.in))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != c.want {
				t.Fatalf("got  %s\nwant %s", got, c.want)
			}
		})
	}
}

func TestCanonicalC4Strings(t *testing.T) {
	in := `{"s":"\u2028\u2029\u0007\b\f\n\r\t\u007f\/\u00e9\ud83d\ude00\ud800"}`
	want := "7b2273223a22e280a8e280a95c75303030375c625c665c6e5c725c747f2fc3a9f09f98805c7564383030227d"
	got, err := Canonicalize([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if hex.EncodeToString(got) != want {
		t.Fatalf("got %x\nwant %s", got, want)
	}
	// The canonical form is a fixed point.
	again, err := Canonicalize(got)
	if err != nil || string(again) != string(got) {
		t.Fatalf("not idempotent: %x, %v", again, err)
	}
}

func TestCanonicalC7Digest(t *testing.T) {
	if d := SHA256Hex([]byte("{}")); d != "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a" {
		t.Fatal(d)
	}
}

func TestCanonicalLoneSurrogates(t *testing.T) {
	cases := map[string]string{
		`"\udc00x"`:       `"\udc00x"`,
		`"\ud800\ud800"`:  `"\ud800\ud800"`,
		`"\ud800\u0041"`:  `"\ud800A"`,
		`"\uDBFF\uDFFF"`:  "\"\U0010FFFF\"",
		`"a\ud800"`:       `"a\ud800"`,
		`"\uDFFF\uD800"`:  `"\udfff\ud800"`,
		`"\u0000\u001F"`:  `"\u0000\u001f"`,
		`"\u00e9\u2028"`:  "\"é\u2028\"",
		`"\"\\"`:          `"\"\\"`,
		`"tab\there"`:     `"tab\there"`,
		`"\ud83d\ude00z"`: "\"\U0001F600z\"",
	}
	for in, want := range cases {
		got, err := Canonicalize([]byte(in))
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if string(got) != want {
			t.Errorf("%s: got %q want %q", in, got, want)
		}
	}
}

func TestNumberFormatting(t *testing.T) {
	cases := []struct {
		f    float64
		want string
	}{
		{0, "0"}, {math.Copysign(0, -1), "0"}, {1, "1"}, {-1, "-1"}, {0.1, "0.1"}, {1.5, "1.5"},
		{100, "100"}, {123456789, "123456789"}, {1e20, "100000000000000000000"}, {1e21, "1e+21"},
		{1.5e21, "1.5e+21"}, {1e-6, "0.000001"}, {1e-7, "1e-7"}, {1.25e-7, "1.25e-7"},
		{0.000123, "0.000123"}, {9007199254740991, "9007199254740991"}, {9007199254740993, "9007199254740992"},
		{math.MaxFloat64, "1.7976931348623157e+308"}, {5e-324, "5e-324"}, {-2.5e-10, "-2.5e-10"},
		{123.456, "123.456"}, {math.Inf(1), "null"}, {math.NaN(), "null"}, {0.30000000000000004, "0.30000000000000004"},
	}
	for _, c := range cases {
		if got := string(AppendNumber(nil, c.f)); got != c.want {
			t.Errorf("%v: got %s want %s", c.f, got, c.want)
		}
	}
}

func TestParseRejects(t *testing.T) {
	bad := []string{
		``, `{`, `{"a":}`, `{"a" 1}`, `[1,]`, `{"a":1,}`, `01`, `1.`, `.5`, `1e`, `-`, `"\x"`, `"\u12"`,
		"\"a\x01\"", `tru`, `{} {}`, `{"a":1}x`, "\"\xff\"", `NaN`, `+1`, `'a'`,
	}
	for _, s := range bad {
		if _, err := Parse([]byte(s)); !errors.Is(err, ErrInvalidJSON) {
			t.Errorf("%q: want ErrInvalidJSON, got %v", s, err)
		}
	}
	deep := make([]byte, 0, 2*(maxDepth+2))
	for i := 0; i < maxDepth+2; i++ {
		deep = append(deep, '[')
	}
	for i := 0; i < maxDepth+2; i++ {
		deep = append(deep, ']')
	}
	if _, err := Parse(deep); !errors.Is(err, ErrInvalidJSON) {
		t.Errorf("deep nesting accepted: %v", err)
	}
}

// Marshal keeps struct field order and writes HTML characters and U+2028 raw,
// where encoding/json would escape them.
func TestMarshalStructAndRaw(t *testing.T) {
	body, err := RawFromJSON([]byte(`{"z":"<a>\u2028","10":1,"2":[true,null]}`))
	if err != nil {
		t.Fatal(err)
	}
	v := struct {
		B    string `json:"b"`
		A    int    `json:"a"`
		Opt  string `json:"opt,omitempty"`
		Body Raw    `json:"body"`
		None Raw    `json:"none,omitzero"`
	}{B: "x&y", A: 3, Body: body}
	got, err := Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	want := "{\"b\":\"x&y\",\"a\":3,\"body\":{\"2\":[true,null],\"10\":1,\"z\":\"<a>\u2028\"}}"
	if string(got) != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	// Raw round-trips through encoding/json decoding with order intact.
	var back struct {
		Body Raw `json:"body"`
	}
	if err := json.Unmarshal(got, &back); err != nil {
		t.Fatal(err)
	}
	c, _ := back.Body.Canonical()
	if string(c) != "{\"2\":[true,null],\"10\":1,\"z\":\"<a>\u2028\"}" {
		t.Fatalf("raw round trip: %s", c)
	}
}

func TestObjectHelpers(t *testing.T) {
	o := &Object{}
	o.Set("a", 1.0)
	o.Set("b", "x")
	o.Set("a", 2.0)
	if v, _ := o.Get("a"); v != 2.0 || o.Len() != 2 {
		t.Fatalf("set: %v", o.Members)
	}
	o.Delete("a")
	if _, ok := o.Get("a"); ok || o.Len() != 1 {
		t.Fatal("delete")
	}
	// A hand-built object with duplicates still encodes each key once.
	dup := &Object{Members: []Member{{"k", 1.0}, {"j", 2.0}, {"k", 3.0}}}
	if b, _ := Canonical(dup); string(b) != `{"k":3,"j":2}` {
		t.Fatalf("dup: %s", b)
	}
	if _, err := Canonical(struct{}{}); !errors.Is(err, ErrUnsupportedValue) {
		t.Fatalf("unsupported: %v", err)
	}
}

func BenchmarkCanonicalize(b *testing.B) {
	in := []byte(`{"protocolVersion":1,"generation":7,"leaseToken":"QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl8","incarnationId":"AAECAwQFBgcICQoLDA0ODxAR","status":"fulfilled","result":{"run":{"stdout":"a<b>&c\u2028","stderr":"","code":0,"signal":null,"output":"a<b>&c\u2028"},"language":"python","version":"3.12.0","10":1,"2":2}}`)
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		if _, err := Canonicalize(in); err != nil {
			b.Fatal(err)
		}
	}
}
