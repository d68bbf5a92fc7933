// Package bytesize is codellm's one reading and writing of byte sizes in flags and environment variables,
// for serve, hub and worker alike: plain bytes, or a number with a binary (K, KiB, M, MiB, G, GiB) or
// decimal (KB, MB, GB) unit, case-insensitive. "64M" and "64MiB" are both 64·2²⁰; "64MB" is 64·10⁶.
package bytesize

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

var units = map[string]int64{"": 1, "b": 1,
	"k": 1 << 10, "kb": 1000, "kib": 1 << 10,
	"m": 1 << 20, "mb": 1000 * 1000, "mib": 1 << 20,
	"g": 1 << 30, "gb": 1000 * 1000 * 1000, "gib": 1 << 30}

// Parse reads a size. Negative numbers, fractions, unknown units and sizes over 2⁶² bytes are errors.
func Parse(v string) (int64, error) {
	s := strings.TrimSpace(v)
	i := strings.IndexFunc(s, func(r rune) bool { return !unicode.IsDigit(r) })
	num, unit := s, ""
	if i >= 0 {
		num, unit = s[:i], strings.TrimSpace(s[i:])
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || num == "" {
		return 0, fmt.Errorf("invalid size %q (want bytes or a suffix such as 64MiB)", v)
	}
	mult := units[strings.ToLower(unit)]
	if mult == 0 {
		return 0, fmt.Errorf("invalid size unit in %q (use B, KiB, MiB, GiB, KB, MB or GB)", v)
	}
	if n > (1<<62)/mult {
		return 0, fmt.Errorf("size %q is too large", v)
	}
	return n * mult, nil
}

// Format writes n in the largest binary unit that divides it exactly ("64MiB", "10KiB", "1000"), so
// Parse(Format(n)) == n.
func Format(n int64) string {
	for _, u := range []struct {
		suffix string
		size   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}
