package config

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// Usage writes the sets registered into fs as --help: each flag with its placeholder, default, usage and
// every other spelling under the families, then the environment-only settings, then the precedence rule.
func Usage(w io.Writer, fs *flag.FlagSet, families []Family) {
	var b strings.Builder
	var envOnly []*Setting
	b.WriteString("Flags:\n")
	for _, s := range Sets(fs) {
		for i := range s.Settings {
			st := &s.Settings[i]
			if st.EnvOnly {
				envOnly = append(envOnly, st)
				continue
			}
			writeSetting(&b, st, "--"+st.Name+" "+st.Kind.placeholder(), families)
		}
	}
	if len(envOnly) > 0 {
		b.WriteString("\nEnvironment only:\n")
		for _, st := range envOnly {
			ph := st.Kind.placeholder()
			if ph == "" {
				ph = "BOOL" // a flag's bool needs no value; a variable's does
			}
			writeSetting(&b, st, st.EnvName()+"="+ph, families)
		}
	}
	other := false
	fs.VisitAll(func(f *flag.Flag) {
		if _, ok := f.Value.(*flagValue); !ok {
			if !other {
				b.WriteString("\nOther flags (command line only):\n")
				other = true
			}
			fmt.Fprintf(&b, "  --%s\n    \t%s\n", f.Name, f.Usage)
		}
	})
	if readsEnv(fs) {
		b.WriteString("\nThe command line wins, then CODELLM_*")
		for _, f := range families {
			b.WriteString(", then " + f.Prefix + "*")
		}
		b.WriteString(", then the other spellings in the order shown; an empty variable counts as unset.\n")
	}
	io.WriteString(w, b.String())
}

func writeSetting(b *strings.Builder, st *Setting, head string, families []Family) {
	fmt.Fprintf(b, "  %s", strings.TrimSpace(head))
	if st.Default != "" && !st.Secret {
		fmt.Fprintf(b, " (default %s)", st.Default)
	}
	fmt.Fprintf(b, "\n    \t%s\n", st.Usage)
	var other []string
	for _, p := range st.Spellings(families) {
		if p.Name != "--"+st.Name && !(st.EnvOnly && p.Name == st.EnvName()) {
			other = append(other, p.Name)
		}
	}
	if len(other) > 0 {
		fmt.Fprintf(b, "    \talso: %s\n", strings.Join(other, ", "))
	}
}

// Markdown writes the sets registered into fs as a Markdown table for the docs: each setting with its
// kind, default, every spelling in precedence order and its usage.
func Markdown(w io.Writer, fs *flag.FlagSet, families []Family) {
	var b strings.Builder
	b.WriteString("| setting | kind | default | spellings, highest first | meaning |\n|---|---|---|---|---|\n")
	for _, s := range Sets(fs) {
		for i := range s.Settings {
			st := &s.Settings[i]
			var names []string
			for _, p := range st.Spellings(families) {
				names = append(names, "`"+p.Name+"`")
			}
			def := "—"
			if st.Default != "" && !st.Secret {
				def = "`" + st.Default + "`"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", st.display(), st.Kind, def, strings.Join(names, " "),
				strings.ReplaceAll(st.Usage, "|", "\\|"))
		}
	}
	io.WriteString(w, b.String())
}

// readsEnv reports whether any setting registered into fs has a variable.
func readsEnv(fs *flag.FlagSet) bool {
	for _, s := range Sets(fs) {
		for i := range s.Settings {
			if !s.Settings[i].FlagOnly {
				return true
			}
		}
	}
	return false
}
