package main

import (
	"flag"
	"fmt"
	"log/slog"
	"strconv"
)

// trip2gAlias is one of trip2g's codellm settings accepted under its own name, so an operator's existing
// flags and environment start codellm with the same effect. The alias flag is registered beside ours and,
// like every flag, is also read from its CODELLM_ variable — which is exactly trip2g's variable name.
type trip2gAlias struct {
	alias, ours string
	same        func(a, b string) bool // whether two values mean the same setting
}

var trip2gAliases = []trip2gAlias{
	{"addr", "listen", func(a, b string) bool { return a == b }},                                                                         // -addr, CODELLM_ADDR
	{"max-stdout-bytes", "max-output-bytes", sameSize},                                                                                   // -max-stdout-bytes, CODELLM_MAX_STDOUT_BYTES
	{"sandbox-network", "network", func(a, b string) bool { x, _ := strconv.ParseBool(a); y, _ := strconv.ParseBool(b); return x == y }}, // CODELLM_SANDBOX_NETWORK
}

func sameSize(a, b string) bool {
	x, err1 := parseByteSize(a)
	y, err2 := parseByteSize(b)
	return err1 == nil && err2 == nil && x == y
}

// registerAlias adds the trip2g alias of flag ours to fs.
func registerAlias(fs *flag.FlagSet, ours string) {
	for _, a := range trip2gAliases {
		if a.ours == ours {
			fs.String(a.alias, "", "trip2g's name for --"+ours+" (CODELLM_"+envName(a.alias)[len("CODELLM_"):]+"); --"+ours+" wins when both are set")
		}
	}
}

// resolveAliases applies the trip2g aliases given (on the command line or in the environment) to our
// flags. Our name wins: when both are set and differ, the alias is ignored with a warning. trip2g's
// -max-stdout-bytes 0 means "the default", which is also ours (10 MiB), so it sets nothing.
func resolveAliases(fs *flag.FlagSet, set map[string]bool, log *slog.Logger) error {
	for _, a := range trip2gAliases {
		af, of := fs.Lookup(a.alias), fs.Lookup(a.ours)
		if af == nil || of == nil || !set[a.alias] {
			continue
		}
		v := af.Value.String()
		if a.alias == "max-stdout-bytes" && v == "0" {
			continue
		}
		if set[a.ours] {
			if !a.same(v, of.Value.String()) {
				log.Warn("trip2g setting and codellm setting both given and different; using codellm's",
					"trip2g", "--"+a.alias+" / "+envName(a.alias), "value", v,
					"codellm", "--"+a.ours+" / "+envName(a.ours), "using", of.Value.String())
			}
			continue
		}
		if err := fs.Set(a.ours, v); err != nil {
			return fmt.Errorf("--%s (%s) %q: %v", a.alias, envName(a.alias), v, err)
		}
		set[a.ours] = true
	}
	return nil
}
