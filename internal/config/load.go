package config

import (
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// Set is one group of a command's table (the execution settings, the worker's, …): its settings, and
// what to do with their values once loaded. A command registers one or more sets into its FlagSet and
// loads them together with Load.
type Set struct {
	Settings []Setting
	Bind     func(*Values) // called by Load with the values of every set of the FlagSet (nil: none)
}

// Lookup finds a setting by name (nil when there is none).
func (s *Set) Lookup(name string) *Setting {
	for i := range s.Settings {
		if s.Settings[i].Name == name {
			return &s.Settings[i]
		}
	}
	return nil
}

// Sets lists the sets registered into fs, in registration order.
func Sets(fs *flag.FlagSet) []*Set {
	var out []*Set
	for _, s := range registered(fs) {
		if s != nil {
			out = append(out, s)
		}
	}
	return out
}

// flagValue captures what the command line gave for one spelling, checked as it is parsed so the flag
// package reports a bad value with the flag's name.
type flagValue struct {
	set  *Set
	s    *Setting
	seq  int // registration order of the set
	raws []string
}

func (v *flagValue) String() string {
	if v == nil {
		return ""
	}
	return strings.Join(v.raws, ",")
}

func (v *flagValue) Set(raw string) error {
	if _, err := v.s.parse(raw); err != nil {
		return err
	}
	if v.s.Kind == List {
		v.raws = append(v.raws, raw)
	} else {
		v.raws = []string{raw}
	}
	return nil
}

func (v *flagValue) IsBoolFlag() bool { return v.s.Kind == Bool }

// Register adds every flag spelling of the set to fs. A set needs at least one flag to be found by Load.
func (s *Set) Register(fs *flag.FlagSet) {
	seq := len(registered(fs))
	for i := range s.Settings {
		st := &s.Settings[i]
		for _, p := range st.Spellings(nil) {
			if p.IsFlag() {
				fs.Var(&flagValue{set: s, s: st, seq: seq}, p.flag, st.Usage)
			}
		}
	}
}

// registered is the sets of fs by registration order.
func registered(fs *flag.FlagSet) []*Set {
	var out []*Set
	fs.VisitAll(func(f *flag.Flag) {
		if v, ok := f.Value.(*flagValue); ok {
			for len(out) <= v.seq {
				out = append(out, nil)
			}
			out[v.seq] = v.set
		}
	})
	return out
}

// given is one spelling's value.
type given struct {
	from  Spelling
	raws  []string
	typed any
	err   error
}

// value is a setting's loaded value.
type value struct {
	s     *Setting
	from  *Spelling // nil: the default
	typed any
}

// Values are a command's loaded settings.
type Values struct {
	vals     map[string]*value
	warnings []warning
}

type warning struct {
	setting       *Setting
	used, ignored given
}

// Load reads every setting of the sets registered into the parsed fs from the command line and the
// environment (lookup is os.LookupEnv in production; families are the command's alias families) by the
// package's rules, then calls each set's Bind. A bad value is an *Error.
func Load(fs *flag.FlagSet, families []Family, lookup func(string) (string, bool)) (*Values, error) {
	return LoadSets(fs, families, lookup, Sets(fs)...)
}

// LoadSets is Load for the given sets (registered into fs, or environment-only).
func LoadSets(fs *flag.FlagSet, families []Family, lookup func(string) (string, bool), sets ...*Set) (*Values, error) {
	out := &Values{vals: map[string]*value{}}
	for _, s := range sets {
		for i := range s.Settings {
			v, err := out.load(&s.Settings[i], families, fs, lookup)
			if err != nil {
				return nil, err
			}
			out.vals[v.s.Name] = v
		}
	}
	for _, s := range sets {
		if s.Bind != nil {
			s.Bind(out)
		}
	}
	return out, nil
}

// load reads one setting: the highest spelling given wins, the others that differ are warnings.
func (out *Values) load(st *Setting, families []Family, fs *flag.FlagSet, lookup func(string) (string, bool)) (*value, error) {
	var got []given
	for _, p := range st.Spellings(families) {
		if g, ok := read(st, p, fs, lookup); ok {
			got = append(got, g)
		}
	}
	v := &value{s: st}
	if len(got) == 0 {
		typed, err := defaultValue(st)
		if err != nil {
			panic(fmt.Sprintf("config: default of %s: %v", st.Name, err))
		}
		v.typed = typed
		return v, nil
	}
	if got[0].err != nil {
		return nil, &Error{Spelling: got[0].from.Name, Value: st.show(strings.Join(got[0].raws, ",")),
			Setting: st.display(), Err: got[0].err}
	}
	v.from, v.typed = &got[0].from, got[0].typed
	for _, g := range got[1:] {
		if g.err != nil || fmt.Sprint(g.typed) != fmt.Sprint(v.typed) {
			out.warnings = append(out.warnings, warning{setting: st, used: got[0], ignored: g})
		}
	}
	return v, nil
}

// defaultValue is the setting's default: its Default parsed, or the kind's zero (not checked against
// Positive: an unset limit means "the component's own default").
func defaultValue(st *Setting) (any, error) {
	if st.Default == "" {
		return map[Kind]any{String: "", Bool: false, Int: 0, Size: int64(0), Duration: time.Duration(0), List: []string{}}[st.Kind], nil
	}
	return st.parseAll([]string{st.Default})
}

// read is spelling p's value, if it was given (an empty variable is not, unless EmptyIsValue; nor is
// the alias's Unset value).
func read(st *Setting, p Spelling, fs *flag.FlagSet, lookup func(string) (string, bool)) (given, bool) {
	g := given{from: p}
	if p.IsFlag() {
		f := fs.Lookup(p.flag)
		fv, ok := f.Value.(*flagValue)
		if !ok || fv.raws == nil {
			return g, false
		}
		g.raws = fv.raws
	} else {
		raw, ok := lookup(p.env)
		if !ok || raw == "" && !st.EmptyIsValue {
			return g, false
		}
		g.raws = []string{raw}
	}
	if p.unset != "" && len(g.raws) == 1 && g.raws[0] == p.unset {
		return g, false
	}
	g.typed, g.err = st.parseAll(g.raws)
	return g, true
}

// parseAll reads a spelling's raw values: the last one for a single value (a repeated flag), all of
// them for a list.
func (s *Setting) parseAll(raws []string) (any, error) {
	if s.Kind == List {
		return s.parseList(raws)
	}
	return s.parse(raws[len(raws)-1])
}

// Warn logs one warning per setting given by several spellings whose values differ, once: a second
// call logs nothing.
func (v *Values) Warn(log *slog.Logger) {
	ws := v.warnings
	v.warnings = nil
	for _, w := range ws {
		used, ignored := w.used.from, w.ignored.from
		attrs := []any{"setting", w.setting.display(), "using", used.Name, "ignored", ignored.Name}
		if !w.setting.Secret {
			attrs = append(attrs, "value", strings.Join(w.used.raws, ","), "ignored_value", strings.Join(w.ignored.raws, ","))
		}
		if w.ignored.err != nil {
			attrs = append(attrs, "ignored_error", w.ignored.err.Error())
		}
		log.Warn(fmt.Sprintf("%s and %s differ; using %s's %s", used.Name, ignored.Name, used.Family, used.Name), attrs...)
	}
}

// get is the loaded value of a setting the table has, of the kind the caller expects.
func (v *Values) get(name string, k Kind) *value {
	x, ok := v.vals[name]
	if !ok || x.s.Kind != k {
		panic(fmt.Sprintf("config: no %v setting %q in the table", k, name))
	}
	return x
}

// String is a String setting's value.
func (v *Values) String(name string) string { return v.get(name, String).typed.(string) }

// Bool is a Bool setting's value.
func (v *Values) Bool(name string) bool { return v.get(name, Bool).typed.(bool) }

// Int is an Int setting's value.
func (v *Values) Int(name string) int { return v.get(name, Int).typed.(int) }

// Size is a Size setting's value in bytes.
func (v *Values) Size(name string) int64 { return v.get(name, Size).typed.(int64) }

// Duration is a Duration setting's value.
func (v *Values) Duration(name string) time.Duration {
	return v.get(name, Duration).typed.(time.Duration)
}

// List is a List setting's elements.
func (v *Values) List(name string) []string { return v.get(name, List).typed.([]string) }

// IsSet reports whether any spelling gave the setting (its absence may differ from its default).
func (v *Values) IsSet(name string) bool {
	x, ok := v.vals[name]
	if !ok {
		panic(fmt.Sprintf("config: no setting %q in the table", name))
	}
	return x.from != nil
}

// From is the spelling the setting's value came from ("" for the default).
func (v *Values) From(name string) string {
	if x := v.vals[name]; x != nil && x.from != nil {
		return x.from.Name
	}
	return ""
}

func (k Kind) String() string {
	return [...]string{"string", "bool", "int", "size", "duration", "list"}[k]
}
