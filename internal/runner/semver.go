package runner

import (
	"strconv"
	"strings"
)

// Version selection follows Piston, which matches a request's version with node-semver's satisfies()
// against every installed runtime of the language and takes the newest match. The grammar implemented
// here is node-semver's range syntax without prerelease tags: "*", "x" or "" (any); an exact or partial
// version ("3", "3.11", "3.11.2", "3.x", "3.11.*", with an optional "v" or "="); the comparators >, >=,
// <, <=; tilde (~3.11: >=3.11.0 <3.12.0) and caret (^3: >=3.0.0 <4.0.0, ^0.2.3: >=0.2.3 <0.3.0)
// ranges; hyphen ranges ("3.8 - 3.12"); space-separated comparators that must all hold; and "||"
// between alternatives. A selector that does not parse matches nothing.

// semver is a parsed version; a partial one has fewer than 3 known parts.
type semver struct {
	v [3]int
	n int // parts given (0 = "*")
}

func (a semver) cmp(b semver) int {
	for i := 0; i < 3; i++ {
		if a.v[i] != b.v[i] {
			if a.v[i] < b.v[i] {
				return -1
			}
			return 1
		}
	}
	return 0
}

// bump returns the smallest version above every version matching the partial p (p.n ≥ 1): 3.11 → 3.12.0.
func bump(p semver, at int) semver {
	out := semver{n: 3}
	copy(out.v[:at], p.v[:at])
	out.v[at-1]++
	return out
}

// parsePartial parses "3", "3.11", "3.11.2", "3.x", "3.*", "*", "v3", "=3.1" (prefix already stripped
// by the caller for "=").
func parsePartial(s string) (semver, bool) {
	s = strings.TrimPrefix(strings.TrimPrefix(s, "="), "v")
	if s == "" || s == "*" || s == "x" || s == "X" {
		return semver{}, true
	}
	var p semver
	wild := false
	for i, part := range strings.Split(s, ".") {
		isWild := part == "*" || part == "x" || part == "X"
		if i >= 3 || (wild && !isWild) {
			return semver{}, false
		}
		if wild = wild || isWild; wild {
			continue
		}
		n, err := strconv.Atoi(part)
		if err != nil || n < 0 || part[0] == '+' {
			return semver{}, false
		}
		p.v[i], p.n = n, i+1
	}
	return p, true
}

type comparator struct {
	op string // ">=", ">", "<", "<="
	v  semver
}

func (c comparator) ok(v semver) bool {
	r := v.cmp(c.v)
	switch c.op {
	case ">=":
		return r >= 0
	case ">":
		return r > 0
	case "<":
		return r < 0
	case "<=":
		return r <= 0
	}
	return false
}

// expand turns one operator and partial version into comparators (node-semver's desugaring).
func expand(op string, p semver) ([]comparator, bool) {
	full := semver{v: p.v, n: 3}
	if p.n == 0 {
		if op == "<" || op == ">" {
			return []comparator{{"<", semver{n: 3}}}, true // "<*" and ">*" match nothing
		}
		return nil, true
	}
	switch op {
	case "", "=":
		if p.n == 3 {
			return []comparator{{">=", full}, {"<=", full}}, true
		}
		return []comparator{{">=", full}, {"<", bump(p, p.n)}}, true
	case ">=":
		return []comparator{{">=", full}}, true
	case ">":
		if p.n == 3 {
			return []comparator{{">", full}}, true
		}
		return []comparator{{">=", bump(p, p.n)}}, true
	case "<":
		return []comparator{{"<", full}}, true
	case "<=":
		if p.n == 3 {
			return []comparator{{"<=", full}}, true
		}
		return []comparator{{"<", bump(p, p.n)}}, true
	case "~":
		at := min(p.n, 2)
		return []comparator{{">=", full}, {"<", bump(p, at)}}, true
	case "^":
		at := 1
		for at < p.n && p.v[at-1] == 0 {
			at++
		}
		return []comparator{{">=", full}, {"<", bump(p, at)}}, true
	}
	return nil, false
}

// parseRange parses one "||" alternative into comparators that must all hold.
func parseRange(s string) ([]comparator, bool) {
	fields := strings.Fields(s)
	if len(fields) == 3 && fields[1] == "-" {
		lo, ok1 := parsePartial(fields[0])
		hi, ok2 := parsePartial(fields[2])
		if !ok1 || !ok2 {
			return nil, false
		}
		a, _ := expand(">=", lo)
		b, _ := expand("<=", hi)
		return append(a, b...), true
	}
	var out []comparator
	for i := 0; i < len(fields); i++ {
		f := fields[i]
		op := ""
		for _, o := range []string{">=", "<=", ">", "<", "=", "~>", "~", "^"} {
			if strings.HasPrefix(f, o) {
				op, f = o, f[len(o):]
				break
			}
		}
		if op == "~>" {
			op = "~"
		}
		if f == "" && op != "" && i+1 < len(fields) { // "> 3" with a space
			i++
			f = fields[i]
		}
		p, ok := parsePartial(f)
		if !ok {
			return nil, false
		}
		cs, ok := expand(op, p)
		if !ok {
			return nil, false
		}
		out = append(out, cs...)
	}
	return out, true
}

// versionMatches reports whether an installed version ("3.11.2") satisfies a Piston/node-semver selector.
func versionMatches(installed, sel string) bool {
	v, ok := parsePartial(installed)
	if !ok || v.n == 0 {
		return false
	}
	v.n = 3
	for _, alt := range strings.Split(sel, "||") {
		cs, ok := parseRange(alt)
		if !ok {
			continue
		}
		all := true
		for _, c := range cs {
			all = all && c.ok(v)
		}
		if all {
			return true
		}
	}
	return false
}
