package wire

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// A refusal's text, relayed alone (as a worker relays it to its hub), is recognised as that refusal; no
// other text is.
func TestMetadataErrorRoundTrip(t *testing.T) {
	for _, e := range []*MetadataError{
		MalformedMetadata("seed", json.RawMessage(`{}`), "a string"),
		RefusedNetworkAllow(errors.New(`invalid network allow-list: "pypi.org" is not on the operator's allow-list`)),
		func() *MetadataError {
			_, e := DecodeNetworkAllow(map[string]json.RawMessage{"network_allow": []byte(`7`)})
			return e
		}(),
	} {
		got, ok := ParseMetadataError(e.Error())
		if !ok || got.Field != e.Field || got.Error() != e.Error() {
			t.Errorf("ParseMetadataError(%q) = %+v, %v; want field %q", e.Error(), got, ok, e.Field)
		}
	}
	for _, msg := range []string{"", "runtime is unknown", `files[0]: field "metadata.seed" is quoted later`,
		`field "metadata.`, `field "metadata."`, `field "other.seed" must be a string`} {
		if e, ok := ParseMetadataError(msg); ok {
			t.Errorf("ParseMetadataError(%q) = %+v: not a refusal", msg, e)
		}
	}
	if want := `field "metadata.network_allow": no`; RefusedNetworkAllow(errors.New("no")).Error() != want {
		t.Errorf("RefusedNetworkAllow = %q, want %q", RefusedNetworkAllow(errors.New("no")).Error(), want)
	}
}

func TestDecodeDeterminism(t *testing.T) {
	meta := func(s string) map[string]json.RawMessage {
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	d, e := DecodeDeterminism(meta(`{"deterministic":"true","seed":42,"now":"1704164645"}`))
	if e != nil || d.On == nil || !*d.On || *d.Seed != "42" || !d.Now.Equal(time.Unix(1704164645, 0)) {
		t.Fatalf("typed values: %+v, %v", d, e)
	}
	d, e = DecodeDeterminism(meta(`{"deterministic":false,"seed":null,"now":"2024-01-02T03:04:05.9+01:00"}`))
	if e != nil || d.On == nil || *d.On || d.Seed != nil || d.Now != time.Date(2024, 1, 2, 2, 4, 5, 0, time.UTC) {
		t.Fatalf("bool, null, RFC 3339: %+v, %v", d, e)
	}
	if d, e := DecodeDeterminism(nil); e != nil || !d.Absent() {
		t.Fatalf("absent: %+v, %v", d, e)
	}
	for in, want := range map[string]string{
		`{"deterministic":"yes"}`:  `field "metadata.deterministic" must be "true" or "false", got "yes"`,
		`{"seed":[1]}`:             `field "metadata.seed" must be a string, got [1]`,
		`{"now":"-5"}`:             `field "metadata.now" must be an RFC 3339 time or Unix seconds, got "-5"`,
		`{"now":"99999999999999"}`: `field "metadata.now" must be an RFC 3339 time or Unix seconds, got "99999999999999"`,
	} {
		if _, e := DecodeDeterminism(meta(in)); e == nil || e.Error() != want {
			t.Errorf("%s: %v, want %s", in, e, want)
		}
	}
}

func TestEnabled(t *testing.T) {
	on, seed := true, "s"
	for _, c := range []struct {
		d       Determinism
		def     bool
		want    bool
		refused bool
	}{
		{Determinism{}, false, false, false},
		{Determinism{}, true, true, false},
		{Determinism{On: &on}, false, true, false},
		{Determinism{Seed: &seed}, false, false, true},
		{Determinism{Now: time.Unix(5, 0)}, false, false, true},
		{Determinism{Seed: &seed}, true, true, false},
	} {
		got, err := c.d.Enabled(c.def)
		if got != c.want || (err != nil) != c.refused || (err != nil && !errors.Is(err, ErrSeedWithoutMode)) {
			t.Errorf("%+v with default %v: %v, %v", c.d, c.def, got, err)
		}
	}
}

func TestNetworkAllow(t *testing.T) {
	if l, e := DecodeNetworkAllow(map[string]json.RawMessage{"network_allow": []byte(`" a.com, ,b.org,"`)}); e != nil || strings.Join(*l, "|") != "a.com|b.org" {
		t.Fatalf("list: %v, %v", l, e)
	}
	if l, e := DecodeNetworkAllow(map[string]json.RawMessage{"network_allow": []byte(`""`)}); e != nil || l == nil || len(*l) != 0 {
		t.Fatalf("empty list (no egress at all) must stay distinct from absent: %v, %v", l, e)
	}
	if l, e := DecodeNetworkAllow(map[string]json.RawMessage{"network_allow": []byte(`null`)}); e != nil || l != nil {
		t.Fatalf("null: %v, %v", l, e)
	}
}

func TestUTF16(t *testing.T) {
	s := "a😀b\xffé" // 1 + 2 + 1 + 1 (an invalid byte is one U+FFFD) + 1 units
	if n := UTF16Len(s); n != 6 {
		t.Fatalf("UTF16Len = %d", n)
	}
	for n, want := range map[int]string{0: "", 1: "a", 2: "a", 3: "a😀", 4: "a😀b", 6: s, 9: s} {
		if got := ClipUTF16(s, n); got != want {
			t.Errorf("ClipUTF16(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestAbbrev(t *testing.T) {
	for _, c := range []struct {
		s    string
		n    int
		want string
	}{{"abc", 3, "abc"}, {"abcd", 3, "abc…"}, {"aé", 2, "a…"}, {"ééé", 4, "éé…"}} {
		if got := Abbrev(c.s, c.n); got != c.want {
			t.Errorf("Abbrev(%q, %d) = %q, want %q", c.s, c.n, got, c.want)
		}
	}
}

func TestDeterminismHeaderValue(t *testing.T) {
	now := FormatNow(time.Date(2024, 1, 2, 4, 4, 5, 0, time.FixedZone("x", 3600)))
	if got := DeterminismHeaderValue("s\"é", now); got != `seed="s\"\u00e9"; now=2024-01-02T03:04:05Z` {
		t.Fatalf("header value %s", got)
	}
}

func TestCheckFileName(t *testing.T) {
	long := strings.Repeat("a", 256)
	for name, want := range map[string]string{
		"main.py": "", "src/pkg/a b.txt": "", "ünï/cödé": "", strings.Repeat("a/", 511) + "a": "",
		"":                        "is empty",
		strings.Repeat("a", 1025): "is longer than 1024 bytes",
		"a\xffb":                  "is not valid UTF-8",
		"a\tb":                    "contains a control character or a backslash",
		"a\\b":                    "contains a control character or a backslash",
		"a\x7f":                   "contains a control character or a backslash",
		"/etc/passwd":             "must be relative",
		"..":                      "escapes the workspace",
		"../x":                    "escapes the workspace",
		".":                       `must be a clean path (no empty, "." or ".." components)`,
		"a/../../x":               `must be a clean path (no empty, "." or ".." components)`,
		"a//b":                    `must be a clean path (no empty, "." or ".." components)`,
		"a/./b":                   `must be a clean path (no empty, "." or ".." components)`,
		"a/":                      `must be a clean path (no empty, "." or ".." components)`,
		"a/" + long:               "has a component longer than 255 bytes",
	} {
		if got := CheckFileName(name); got != want {
			t.Errorf("CheckFileName(%q) = %q, want %q", Abbrev(name, 40), got, want)
		}
	}
}
