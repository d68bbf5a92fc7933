package sandbox

import "errors"

// withDisabled returns a copy of s with some mechanisms switched off (for
// differential tests).
func withDisabled(s *Sandbox, names ...string) *Sandbox {
	c := &Sandbox{cfg: s.cfg, log: s.log, report: s.report, plat: s.plat}
	c.cfg.Mode = ModeBestEffort // native would refuse a partial set
	for _, n := range names {
		b, ok := mechByName(n)
		if !ok {
			panic("unknown mechanism " + n)
		}
		c.plat.disabled |= b
	}
	return c
}

func errorsAs(err error, target any) bool { return errors.As(err, target) }
