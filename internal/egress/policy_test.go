package egress

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
)

func TestNormalizeName(t *testing.T) {
	for in, want := range map[string]string{
		"Example.COM":           "example.com",
		"example.com.":          "example.com",
		" pypi.org ":            "pypi.org",
		"Bücher.example":        "xn--bcher-kva.example",
		"ｅｘａｍｐｌｅ.com":           "example.com", // full-width forms map to ASCII
		"xn--bcher-kva.example": "xn--bcher-kva.example",
	} {
		got, err := NormalizeName(in)
		if err != nil || got != want {
			t.Errorf("NormalizeName(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", ".", "a..b", "exa mple.com", "a_b.com", string(make([]byte, 70)) + ".com", "-lead.com"} {
		if got, err := NormalizeName(bad); err == nil {
			t.Errorf("NormalizeName(%q) = %q, want an error", bad, got)
		}
	}
}

func TestParseEntries(t *testing.T) {
	p, err := Parse([]string{"PyPI.org.", "*.PythonHosted.org", "pypi.org", " ", "10.0.0.0/8", "::ffff:192.0.2.1", "2001:db8::/32", "192.0.2.7"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"*.pythonhosted.org", "10.0.0.0/8", "192.0.2.1", "192.0.2.7", "2001:db8::/32", "pypi.org"}
	if got := p.Entries(); !slices.Equal(got, want) {
		t.Fatalf("Entries = %q, want %q", got, want)
	}
	for _, bad := range []string{"*", "*.com", "http://pypi.org", "pypi.org:443", "pypi.org/simple", "a*.b.com", "*.*.b.com", "fe80::1%eth0"} {
		if _, err := Parse([]string{bad}); !errors.Is(err, ErrPolicy) {
			t.Errorf("Parse(%q) = %v, want ErrPolicy", bad, err)
		}
	}
}

func TestMatching(t *testing.T) {
	p, err := Parse([]string{"pypi.org", "*.pythonhosted.org", "10.1.0.0/16", "192.0.2.7"})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{
		"pypi.org":                  true,
		"www.pypi.org":              false, // exact means exact
		"files.pythonhosted.org":    true,
		"a.b.pythonhosted.org":      true,
		"pythonhosted.org":          false, // *.s is strict subdomains only
		"evilpythonhosted.org":      false,
		"pythonhosted.org.evil.com": false,
		"pypi.org.evil.com":         false,
	} {
		if got := p.AllowsName(name); got != want {
			t.Errorf("AllowsName(%q) = %v, want %v", name, got, want)
		}
	}
	for a, want := range map[string]bool{"10.1.2.3": true, "10.2.0.1": false, "192.0.2.7": true, "192.0.2.8": false, "::ffff:10.1.0.1": true} {
		if got := p.AllowsAddr(netip.MustParseAddr(a)); got != want {
			t.Errorf("AllowsAddr(%s) = %v, want %v", a, got, want)
		}
	}
	var empty *Policy
	if empty.AllowsName("pypi.org") || !empty.Empty() || len(empty.Entries()) != 0 {
		t.Error("a nil policy must allow nothing")
	}
}

func TestNarrow(t *testing.T) {
	p, err := Parse([]string{"pypi.org", "*.pythonhosted.org", "10.1.0.0/16"})
	if err != nil {
		t.Fatal(err)
	}
	q, err := p.Narrow([]string{"PYPI.org", "*.files.pythonhosted.org", "files.pythonhosted.org", "10.1.2.0/24"})
	if err != nil {
		t.Fatal(err)
	}
	if !q.AllowsName("pypi.org") || q.AllowsName("x.pythonhosted.org") || !q.AllowsName("a.files.pythonhosted.org") {
		t.Errorf("narrowed policy %q matches wrongly", q.Entries())
	}
	for _, wider := range [][]string{{"evil.com"}, {"*.org"}, {"*.pypi.org"}, {"10.0.0.0/8"}, {"10.2.0.1"}, {"pythonhosted.org"}} {
		if _, err := p.Narrow(wider); !errors.Is(err, ErrPolicy) {
			t.Errorf("Narrow(%q) = %v, want ErrPolicy", wider, err)
		}
	}
	none, err := p.Narrow([]string{})
	if err != nil || !none.Empty() {
		t.Errorf("Narrow(empty) = %v, %v; want an empty policy", none, err)
	}
}

func TestBlocked(t *testing.T) {
	for a, want := range map[string]string{
		"127.0.0.1": "loopback", "::1": "loopback", "10.0.0.1": "private", "172.16.0.1": "private",
		"192.168.1.1": "private", "fd12::1": "private", "169.254.169.254": "metadata", "169.254.1.1": "link-local",
		"fe80::1": "link-local", "0.0.0.0": "unspecified", "::": "unspecified", "224.0.0.1": "multicast",
		"100.64.0.1": "private", "255.255.255.255": "reserved", "::ffff:127.0.0.1": "loopback",
		"64:ff9b::a00:1": "translated", "fd00:ec2::254": "metadata", "100.100.100.200": "metadata",
		"93.184.215.14": "", "2606:4700::1111": "",
	} {
		if got := Blocked(netip.MustParseAddr(a)); got != want {
			t.Errorf("Blocked(%s) = %q, want %q", a, got, want)
		}
	}
}

// One allow-list, however it is spelt, has one digest; another list has another.
func TestPolicyDigest(t *testing.T) {
	a, err := ParseList("Example.COM.,*.pypi.org,example.com,xn--bcher-kva.example")
	if err != nil {
		t.Fatal(err)
	}
	b, err := ParseList("bücher.example , *.PYPI.org, example.com")
	if err != nil {
		t.Fatal(err)
	}
	c, _ := ParseList("example.com")
	if a.Digest() != b.Digest() || a.Digest() == c.Digest() || len(a.Digest()) != 64 {
		t.Fatalf("digests: %s %s %s", a.Digest(), b.Digest(), c.Digest())
	}
}
