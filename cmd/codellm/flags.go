package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/codellm/codellm/internal/bytesize"
)

// envName maps a flag name to its environment variable: CODELLM_ + upper snake case.
func envName(flagName string) string {
	return "CODELLM_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// applyEnv sets every flag not given on the command line from its CODELLM_ variable (or an alias), so
// that each flag can be configured either way and the command line wins. It reports which flags ended up
// set (from either source), which matters for flags whose absence differs from an empty value
// (--allowed-programs).
func applyEnv(fs *flag.FlagSet, aliases map[string][]string) (map[string]bool, error) {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || err != nil {
			return
		}
		names := append([]string{envName(f.Name)}, aliases[f.Name]...)
		for _, n := range names {
			v, ok := os.LookupEnv(n)
			if !ok {
				continue
			}
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s=%q: %v", n, v, e)
				return
			}
			set[f.Name] = true
			return
		}
	})
	return set, err
}

// listFlag is a repeatable flag whose values may also be comma-separated.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error {
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l = append(*l, p)
		}
	}
	return nil
}

// prefixFlag is a repeatable flag of non-empty prefixes (an empty prefix would expose everything).
type prefixFlag []string

func (l *prefixFlag) String() string { return strings.Join(*l, ",") }
func (l *prefixFlag) Set(v string) error {
	if v == "" {
		return fmt.Errorf("an empty prefix would expose the whole environment")
	}
	*l = append(*l, v)
	return nil
}

// byteSize is a size flag accepting plain bytes or a binary/decimal suffix (64MiB, 1GiB, 512K, 10MB).
type byteSize int64

// String is the human form ("64MiB"), which is also what --help prints as the default.
func (b *byteSize) String() string { return bytesize.Format(int64(*b)) }
func (b *byteSize) Set(v string) error {
	n, err := parseByteSize(v)
	if err != nil {
		return err
	}
	*b = byteSize(n)
	return nil
}

func parseByteSize(v string) (int64, error) { return bytesize.Parse(v) }
