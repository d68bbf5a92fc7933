package redisstore

import (
	"context"
	"fmt"
	"strings"
)

// Settings is what Check learned about the server's configuration.
type Settings struct {
	// EvictionPolicy is maxmemory-policy ("noeviction" is the only safe one).
	EvictionPolicy string
	// AOF and RDB report appendonly yes and a non-empty save schedule.
	AOF, RDB bool
}

// Safe reports whether Redis never evicts the store's keys: an evicted
// nonce, fence or credential silently weakens replay protection or fencing.
func (s Settings) Safe() bool { return s.EvictionPolicy == "noeviction" }

// Persistent reports whether the data survives a Redis restart; without
// AOF or RDB a restart is a state loss (every worker must pair again).
func (s Settings) Persistent() bool { return s.AOF || s.RDB }

// Check reads the server settings the store depends on (CONFIG GET). It
// fails when the server does not allow CONFIG (some managed services):
// the caller then cannot verify them and should say so.
func (s *Store) Check(ctx context.Context) (Settings, error) {
	var out Settings
	get := func(name string) (string, error) {
		m, err := s.b.rdb.ConfigGet(ctx, name).Result()
		if err != nil {
			return "", fmt.Errorf("redisstore: CONFIG GET %s: %w", name, err)
		}
		v, ok := m[name]
		if !ok {
			return "", fmt.Errorf("redisstore: CONFIG GET %s: not reported", name)
		}
		return v, nil
	}
	var err error
	if out.EvictionPolicy, err = get("maxmemory-policy"); err != nil {
		return out, err
	}
	aof, err := get("appendonly")
	if err != nil {
		return out, err
	}
	save, err := get("save")
	if err != nil {
		return out, err
	}
	out.AOF, out.RDB = aof == "yes", strings.TrimSpace(save) != ""
	return out, nil
}
