// Package packages is the operator's package sets: libraries beyond the host's own that every block may
// import, read-only. A set is a directory under <dir>/packages/<name> built on the host by `codellm
// packages add` — for python the site-packages pip installs with --target (a virtualenv's libraries
// without its interpreter), for node the node_modules npm installs with --prefix — with a manifest
// (manifest.json) naming its language, that language's version and the packages in it.
//
// The sandbox shows <dir> read-only to every block at sandbox.SharedMount (Config.Shared, the place
// fleetkit lives too); Install puts each set on its interpreters' module path (PYTHONPATH, NODE_PATH), and
// the runner lists the sets on GET /api/v2/packages. A set is built in a temporary directory and renamed
// into place, so a server never sees half of one; a server reads the sets when it starts.
package packages

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/codellm/codellm/internal/interp"
	"github.com/codellm/codellm/internal/sandbox"
)

// Languages a set may be built for.
const (
	Python = "python"
	Node   = "node"
)

// Set is one package set, as its manifest records it.
type Set struct {
	Name            string    `json:"name"`
	Language        string    `json:"language"`         // Python or Node
	LanguageVersion string    `json:"language_version"` // the interpreter it was built with ("3.11.2")
	Packages        []Package `json:"packages"`
	// Dir is the set's host directory (not in the manifest).
	Dir string `json:"-"`
}

// Package is one installed distribution of a set.
type Package struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

var nameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// root is where the sets live inside dir.
func root(dir string) string { return filepath.Join(dir, "packages") }

// List reads every set of dir, by name ("" dir: none). A directory without a valid manifest is an error:
// it was not made by Add.
func List(dir string) ([]Set, error) {
	if dir == "" {
		return nil, nil
	}
	entries, err := os.ReadDir(root(dir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("package sets: %w", err)
	}
	var out []Set
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		s, err := read(filepath.Join(root(dir), e.Name()))
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func read(setDir string) (Set, error) {
	var s Set
	b, err := os.ReadFile(filepath.Join(setDir, "manifest.json"))
	if err == nil {
		err = json.Unmarshal(b, &s)
	}
	if err == nil && (s.Name != filepath.Base(setDir) || (s.Language != Python && s.Language != Node)) {
		err = errors.New("the manifest does not describe this directory")
	}
	if err != nil {
		return s, fmt.Errorf("package set %s: %v (remove it and add it again with codellm packages add)", setDir, err)
	}
	s.Dir = setDir
	return s, nil
}

// modules is the directory of a set that goes on the module path, relative to the set.
func modules(language string) string {
	if language == Node {
		return "node_modules"
	}
	return "site-packages"
}

// Install returns reg with every set on its language's module path: PYTHONPATH for the python
// interpreters, NODE_PATH for node. Each entry is the in-sandbox path (below sandbox.SharedMount, where
// the sandbox shows dir) and then the host path (what a block without a private root sees), as fleetkit's
// entries are.
func Install(reg *interp.Registry, dir string, sets []Set) *interp.Registry {
	for _, s := range sets {
		rel := filepath.Join("packages", s.Name, modules(s.Language))
		value := sandbox.SharedMount + "/" + filepath.ToSlash(rel) + ":" + filepath.Join(dir, rel)
		for _, in := range reg.Interpreters() {
			switch prog := filepath.Base(in.Cmd[0]); {
			case s.Language == Python && strings.HasPrefix(prog, "python3"):
				reg = reg.WithPathEnv(in.Name, "PYTHONPATH", value)
			case s.Language == Node && prog == "node":
				reg = reg.WithPathEnv(in.Name, "NODE_PATH", value)
			}
		}
	}
	return reg
}

// Add builds a set: language's installer with args (pip's or npm's, e.g. a local wheel directory with
// --no-index --find-links, or an npm tarball), run as the caller on the host with the interpreter blocks
// run (found in interp.ChildPATH). The set replaces one of the same name only once it is complete.
// Output of the installer goes to log.
func Add(dir, name, language string, args []string, log io.Writer) (Set, error) {
	if !nameRe.MatchString(name) {
		return Set{}, fmt.Errorf("set name %q: want 1-64 of [a-z0-9_-], beginning with a letter or digit", name)
	}
	if language != Python && language != Node {
		return Set{}, fmt.Errorf("language %q: want python or node", language)
	}
	if len(args) == 0 {
		return Set{}, errors.New("nothing to install: give the installer's arguments (packages, files, --find-links …)")
	}
	if err := os.MkdirAll(root(dir), 0o755); err != nil {
		return Set{}, err
	}
	tmp, err := os.MkdirTemp(root(dir), ".add-"+name+"-")
	if err != nil {
		return Set{}, err
	}
	defer os.RemoveAll(tmp) // after the rename: nothing left
	s := Set{Name: name, Language: language}
	if err := build(tmp, &s, args, log); err != nil {
		return Set{}, err
	}
	if err := finish(tmp, s); err != nil {
		return Set{}, err
	}
	final := filepath.Join(root(dir), name)
	old := filepath.Join(root(dir), ".old-"+name)
	_ = os.RemoveAll(old)
	if err := os.Rename(final, old); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Set{}, err
	}
	if err := os.Rename(tmp, final); err != nil {
		_ = os.Rename(old, final)
		return Set{}, err
	}
	_ = os.RemoveAll(old)
	s.Dir = final
	return s, nil
}

// build runs the installer into tmp and records the interpreter's version and what was installed.
func build(tmp string, s *Set, args []string, log io.Writer) error {
	prog := map[string]string{Python: "python3", Node: "node"}[s.Language]
	path, err := interp.LookPath(prog)
	if err != nil {
		return fmt.Errorf("%s is not installed where blocks find it: %v", prog, err)
	}
	var install *exec.Cmd
	if s.Language == Python {
		install = exec.Command(path, append([]string{"-m", "pip", "install", "--disable-pip-version-check", "--no-warn-script-location",
			"--target", filepath.Join(tmp, "site-packages")}, args...)...)
	} else {
		npm, err := interp.LookPath("npm")
		if err != nil {
			return fmt.Errorf("npm is not installed: %v", err)
		}
		install = exec.Command(npm, append([]string{"install", "--no-audit", "--no-fund", "--prefix", tmp}, args...)...)
	}
	install.Stdout, install.Stderr = log, log
	if err := install.Run(); err != nil {
		return fmt.Errorf("%s failed: %v", strings.Join(install.Args[:min(3, len(install.Args))], " "), err)
	}
	version, err := exec.Command(path, "--version").CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s --version: %v", path, err)
	}
	s.LanguageVersion = strings.TrimPrefix(strings.TrimPrefix(strings.TrimSpace(string(version)), "Python "), "v")
	s.Packages, err = installed(filepath.Join(tmp, modules(s.Language)), s.Language)
	return err
}

var distInfoRe = regexp.MustCompile(`^(.+)-([^-]+)\.dist-info$`)

// installed lists the distributions in a module directory: python's *.dist-info, node's package.json of
// each top-level package (scoped ones included).
func installed(mods, language string) ([]Package, error) {
	var out []Package
	entries, err := os.ReadDir(mods)
	if err != nil {
		return nil, fmt.Errorf("the installer left no %s: %v", filepath.Base(mods), err)
	}
	for _, e := range entries {
		if language == Python {
			if m := distInfoRe.FindStringSubmatch(e.Name()); m != nil {
				out = append(out, Package{Name: m[1], Version: m[2]})
			}
			continue
		}
		dirs := []string{e.Name()}
		if strings.HasPrefix(e.Name(), "@") {
			sub, _ := os.ReadDir(filepath.Join(mods, e.Name()))
			dirs = dirs[:0]
			for _, s := range sub {
				dirs = append(dirs, e.Name()+"/"+s.Name())
			}
		}
		for _, d := range dirs {
			var pj Package
			if b, err := os.ReadFile(filepath.Join(mods, d, "package.json")); err == nil && json.Unmarshal(b, &pj) == nil && pj.Name != "" {
				out = append(out, pj)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// finish writes the manifest and makes the set readable by the sandbox's unprivileged user and
// writable by nobody (the sandbox mounts it read-only anyway; this keeps a running block's view fixed).
func finish(tmp string, s Set) error {
	b, _ := json.MarshalIndent(s, "", "  ")
	if err := os.WriteFile(filepath.Join(tmp, "manifest.json"), append(b, '\n'), 0o444); err != nil {
		return err
	}
	return filepath.WalkDir(tmp, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink != 0 {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		mode := fi.Mode().Perm()&0o555 | 0o444
		if d.IsDir() || mode&0o111 != 0 {
			mode |= 0o111
		}
		if d.IsDir() {
			mode |= 0o200 // the owner may still remove the set
		}
		return os.Chmod(p, mode)
	})
}

// LinkKit makes fleetkit's modules (kitDir, from fleetkit.Materialise(dir)) appear at dir/python and
// dir/node, where the sandbox's shared mount (now dir) shows them at sandbox.SharedMount/python and /node
// as before: relative links inside dir, replaced atomically, so that both the host path and the block's
// view resolve.
func LinkKit(dir, kitDir string) error {
	for _, sub := range []string{"python", "node"} {
		target := filepath.Join(filepath.Base(kitDir), sub)
		link := filepath.Join(dir, sub)
		if cur, err := os.Readlink(link); err == nil && cur == target {
			continue
		}
		tmp := link + ".tmp-link"
		_ = os.Remove(tmp)
		if err := os.Symlink(target, tmp); err != nil {
			return fmt.Errorf("package dir: %w", err)
		}
		if err := os.Rename(tmp, link); err != nil {
			os.Remove(tmp)
			return fmt.Errorf("package dir: %s: %w (move it away: codellm keeps fleetkit there)", link, err)
		}
	}
	return nil
}

// Remove deletes a set.
func Remove(dir, name string) error {
	if !nameRe.MatchString(name) {
		return fmt.Errorf("set name %q: want 1-64 of [a-z0-9_-]", name)
	}
	p := filepath.Join(root(dir), name)
	if _, err := read(p); err != nil {
		return err
	}
	return os.RemoveAll(p)
}
