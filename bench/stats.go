package main

import (
	"math"
	"slices"
	"time"
)

// sample is a set of latencies of one variant.
type sample []time.Duration

// quantile returns the q-quantile (0..1) by the nearest-rank method: the smallest value with at least
// q·n values at or below it. Nearest-rank never invents a latency no run had.
func (s sample) quantile(q float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	c := slices.Clone(s)
	slices.Sort(c)
	k := int(math.Ceil(q*float64(len(c)))) - 1
	k = max(0, min(k, len(c)-1))
	return c[k]
}

func (s sample) p50() time.Duration { return s.quantile(0.50) }
func (s sample) p99() time.Duration { return s.quantile(0.99) }
func (s sample) min() time.Duration { return s.quantile(0) }

// ms converts a duration to milliseconds rounded to 3 decimals, the unit of every JSON latency.
func ms(d time.Duration) float64 { return round3(float64(d) / float64(time.Millisecond)) }

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }

// ratio is a/b rounded, 0 when b is 0 (a missing baseline reads as "no ratio", never as infinity).
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return round3(a / b)
}
