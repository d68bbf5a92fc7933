// Package egress is codellm's filtering egress proxy: the only way out of a
// sandboxed block's network namespace. A block's namespace has no route and
// no resolver; the sandbox creates one listening socket on the namespace's
// loopback and hands it to this package, which answers HTTP CONNECT, plain
// HTTP proxy requests and SOCKS5 CONNECT on it, and connects to a
// destination only when the operator's allow-list names it.
//
// Decisions, in order, for every connection (see [Policy.Check] and
// [Session]):
//
//  1. The destination is a name (never an address chosen by the program):
//     normalised (case, one trailing dot, IDNA to A-labels) and matched
//     against the list: exact names, and "*.suffix" for strict subdomains.
//     A raw IP is refused unless an IP or CIDR entry covers it.
//  2. The proxy resolves the name itself (nothing inside the sandbox can
//     resolve, so nothing leaks over DNS) and drops every address that is
//     loopback, private, link-local, a cloud metadata address or otherwise
//     not public, unless an IP/CIDR entry explicitly allows it; it then
//     dials one of the addresses it checked (no second lookup, so DNS
//     rebinding cannot swap the target after the check).
//  3. Per-run caps on connections and bytes (both directions together).
//
// Every allowed and refused connection is logged with the run id and
// counted through [Metrics].
package egress

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"golang.org/x/net/idna"
)

// ErrPolicy marks an invalid allow-list entry or a per-run list that is not
// narrower than the operator's.
var ErrPolicy = errors.New("invalid network allow-list")

// Policy is a normalised allow-list. The zero value allows nothing.
type Policy struct {
	exact    map[string]bool
	suffixes []string // "example.com" for "*.example.com"
	prefixes []netip.Prefix
	entries  []string // normalised, sorted, de-duplicated
}

// profile is the IDNA mapping for names typed by people and programs:
// UTS #46 mapping (case folding, full-width forms), then the lookup rules.
var profile = idna.New(idna.MapForLookup(), idna.Transitional(false), idna.StrictDomainName(true), idna.BidiRule(), idna.ValidateLabels(true))

// NormalizeName returns the A-label, lower-case form of a DNS name without
// its trailing dot, or an error for anything that is not a valid host name.
func NormalizeName(s string) (string, error) {
	n := strings.TrimSuffix(strings.TrimSpace(s), ".")
	if n == "" {
		return "", fmt.Errorf("%w: empty name", ErrPolicy)
	}
	a, err := profile.ToASCII(n)
	if err != nil {
		return "", fmt.Errorf("%w: %q is not a valid host name: %v", ErrPolicy, s, err)
	}
	a = strings.ToLower(a)
	if len(a) > 253 {
		return "", fmt.Errorf("%w: %q is longer than 253 bytes", ErrPolicy, s)
	}
	for _, l := range strings.Split(a, ".") {
		if l == "" || len(l) > 63 {
			return "", fmt.Errorf("%w: %q has an empty or over-long label", ErrPolicy, s)
		}
	}
	return a, nil
}

// Parse normalises a list of entries: "name", "*.suffix" (strict
// subdomains of suffix, which needs at least two labels), an IP address or
// a CIDR prefix. Schemes, paths, ports and a bare "*" are refused.
func Parse(list []string) (*Policy, error) {
	p := &Policy{exact: map[string]bool{}}
	for _, raw := range list {
		e := strings.TrimSpace(raw)
		if e == "" {
			continue
		}
		norm, err := p.add(e)
		if err != nil {
			return nil, err
		}
		p.entries = append(p.entries, norm)
	}
	slices.Sort(p.entries)
	p.entries = slices.Compact(p.entries)
	return p, nil
}

// ParseList splits a comma-separated list (flags and environment) and
// parses it.
func ParseList(s string) (*Policy, error) { return Parse(strings.Split(s, ",")) }

func (p *Policy) add(e string) (string, error) {
	if strings.ContainsAny(e, "/:") || strings.Contains(e, "://") {
		if pr, err := netip.ParsePrefix(e); err == nil {
			pr = netip.PrefixFrom(pr.Addr().Unmap(), pr.Bits()-unmapBits(pr.Addr())).Masked()
			p.prefixes = append(p.prefixes, pr)
			return pr.String(), nil
		}
		if a, err := netip.ParseAddr(e); err == nil && !strings.Contains(e, "%") {
			return p.addAddr(a), nil
		}
		return "", fmt.Errorf("%w: %q: an entry is a host name, *.suffix, an IP address or a CIDR prefix (no scheme, port or path)", ErrPolicy, e)
	}
	if a, err := netip.ParseAddr(e); err == nil {
		return p.addAddr(a), nil
	}
	if e == "*" {
		return "", fmt.Errorf("%w: a bare \"*\" would allow every destination; use --network instead", ErrPolicy)
	}
	if rest, ok := strings.CutPrefix(e, "*."); ok {
		n, err := NormalizeName(rest)
		if err != nil {
			return "", err
		}
		if !strings.Contains(n, ".") {
			return "", fmt.Errorf("%w: %q is too broad: the suffix needs at least two labels", ErrPolicy, e)
		}
		p.suffixes = append(p.suffixes, n)
		return "*." + n, nil
	}
	if strings.Contains(e, "*") {
		return "", fmt.Errorf("%w: %q: \"*\" is only allowed as a leading \"*.\"", ErrPolicy, e)
	}
	n, err := NormalizeName(e)
	if err != nil {
		return "", err
	}
	p.exact[n] = true
	return n, nil
}

func (p *Policy) addAddr(a netip.Addr) string {
	a = a.Unmap()
	p.prefixes = append(p.prefixes, netip.PrefixFrom(a, a.BitLen()))
	return a.String()
}

func unmapBits(a netip.Addr) int {
	if a.Is4In6() {
		return 96
	}
	return 0
}

// Entries is the normalised list (sorted, de-duplicated): what goes into
// the policy digest and the logs.
func (p *Policy) Entries() []string {
	if p == nil {
		return []string{}
	}
	return slices.Clone(p.entries)
}

// Digest is hex(sha256(the normalised entries joined by "\n")): one value per allow-list, however it
// was spelt (case, trailing dots, Unicode or punycode, order, duplicates), for /readyz and doctor.
func (p *Policy) Digest() string {
	sum := sha256.Sum256([]byte(strings.Join(p.Entries(), "\n")))
	return hex.EncodeToString(sum[:])
}

// Empty reports whether the policy allows nothing.
func (p *Policy) Empty() bool { return p == nil || len(p.entries) == 0 }

// AllowsName reports whether a normalised name is on the list.
func (p *Policy) AllowsName(n string) bool {
	if p == nil {
		return false
	}
	if p.exact[n] {
		return true
	}
	for _, s := range p.suffixes {
		if strings.HasSuffix(n, "."+s) {
			return true
		}
	}
	return false
}

// AllowsAddr reports whether an IP/CIDR entry covers a.
func (p *Policy) AllowsAddr(a netip.Addr) bool {
	if p == nil {
		return false
	}
	a = a.Unmap()
	for _, pr := range p.prefixes {
		if pr.Contains(a) {
			return true
		}
	}
	return false
}

// Narrow returns the policy of one run whose caller asked for list: every
// entry must already be allowed by p (a name by p's names, "*.s" by an
// equal or wider wildcard, an address or prefix by p's prefixes). The
// result never allows more than p.
func (p *Policy) Narrow(list []string) (*Policy, error) {
	q, err := Parse(list)
	if err != nil {
		return nil, err
	}
	for n := range q.exact {
		if !p.AllowsName(n) {
			return nil, fmt.Errorf("%w: %q is not on the operator's allow-list", ErrPolicy, n)
		}
	}
	for _, s := range q.suffixes {
		if !p.coversSuffix(s) {
			return nil, fmt.Errorf("%w: \"*.%s\" is wider than the operator's allow-list", ErrPolicy, s)
		}
	}
	for _, pr := range q.prefixes {
		if !p.coversPrefix(pr) {
			return nil, fmt.Errorf("%w: %s is not on the operator's allow-list", ErrPolicy, pr)
		}
	}
	return q, nil
}

func (p *Policy) coversSuffix(s string) bool {
	for _, o := range p.suffixes {
		if s == o || strings.HasSuffix(s, "."+o) {
			return true
		}
	}
	return false
}

func (p *Policy) coversPrefix(pr netip.Prefix) bool {
	for _, o := range p.prefixes {
		if o.Bits() <= pr.Bits() && o.Contains(pr.Addr()) {
			return true
		}
	}
	return false
}
