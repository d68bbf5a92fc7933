//go:build !linux

package pipeline

func markRunDir(string) error { return nil }

// SweepStale needs /proc to tell dead owners from live ones; elsewhere nothing is swept.
func SweepStale(string) ([]string, []error) { return nil, nil }
