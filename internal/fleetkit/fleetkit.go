// Package fleetkit ships trip2g's block helper library — `import fleetkit` (python) and
// `require('fleetkit')` (node), with trip2g's API and output format — inside the codellm binary, so every
// block can use it without installing anything.
//
// Materialise writes the embedded module files once into a read-only host directory; the sandbox binds
// that directory read-only into every block at sandbox.SharedMount (Config.Shared), and Install puts it on
// the interpreters' module path (PYTHONPATH, NODE_PATH). The modules use the system's YAML libraries as
// trip2g's image does: python3-yaml (PyYAML) and node-yaml (the `yaml` package, found on NODE_PATH under
// /usr/share/nodejs or /usr/lib/node_modules). trip2g ships no shell helper, so neither does codellm.
package fleetkit

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/codellm/codellm/internal/interp"
	"github.com/codellm/codellm/internal/sandbox"
)

//go:embed kit
var kit embed.FS

// API is the surface role notes call; both languages export exactly these names (trip2g pins the same list).
var API = []string{"render", "note", "write", "patch", "emit", "bag", "frontmatter", "secrets", "note_frontmatter", "parse_frontmatter"}

// files returns the embedded tree as relative path → content.
func files() map[string][]byte {
	out := map[string][]byte{}
	_ = fs.WalkDir(kit, "kit", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := kit.ReadFile(p)
			out[strings.TrimPrefix(p, "kit/")] = b
		}
		return nil
	})
	return out
}

// digest names a version of the tree, so one directory serves every process of the same build.
func digest(tree map[string][]byte) string {
	h := sha256.New()
	for _, p := range sortedKeys(tree) {
		fmt.Fprintf(h, "%s\x00%d\x00", p, len(tree[p]))
		h.Write(tree[p])
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// Materialise returns a read-only host directory holding the module tree (python/fleetkit.py,
// node/fleetkit/…), creating it under parent (default: the system temp dir) when needed. The directory is
// named after the content and reused only when it is exactly ours: a directory (not a symlink) owned by
// this euid, writable by nobody else, whose files are byte-identical; otherwise a fresh one is made. Files
// are 0444 and directories 0555 so the sandbox's unprivileged uid can read them and nobody can change them.
func Materialise(parent string) (string, error) {
	if parent == "" {
		parent = os.TempDir()
	}
	parent, err := filepath.Abs(parent)
	if err != nil {
		return "", err
	}
	tree := files()
	dir := filepath.Join(parent, fmt.Sprintf("codellm-fleetkit-%d-%s", os.Geteuid(), digest(tree)))
	if ours(dir, tree) {
		return dir, nil
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		if !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("fleetkit: %w", err)
		}
		// Someone else's, or a half-written one of ours: never trust it, use a private fresh directory.
		if dir, err = os.MkdirTemp(parent, "codellm-fleetkit-"); err != nil {
			return "", fmt.Errorf("fleetkit: %w", err)
		}
	}
	if err := writeTree(dir, tree); err != nil {
		return "", fmt.Errorf("fleetkit: %w", err)
	}
	return dir, nil
}

func writeTree(dir string, tree map[string][]byte) error {
	var dirs []string
	for _, p := range sortedKeys(tree) {
		full := filepath.Join(dir, p)
		for d := filepath.Dir(full); d != dir; d = filepath.Dir(d) {
			if err := os.MkdirAll(d, 0o700); err != nil {
				return err
			}
			dirs = append(dirs, d)
		}
		if err := os.WriteFile(full, tree[p], 0o444); err != nil {
			return err
		}
		if err := os.Chmod(full, 0o444); err != nil { // the umask may have masked bits
			return err
		}
	}
	for _, d := range append(dirs, dir) { // deepest first, the root last
		if err := os.Chmod(d, 0o555); err != nil {
			return err
		}
	}
	return nil
}

// ours reports whether dir is a complete, untampered tree made by this euid.
func ours(dir string, tree map[string][]byte) bool {
	safe := func(p string, wantDir bool) bool {
		fi, err := os.Lstat(p)
		if err != nil || fi.IsDir() != wantDir || (!wantDir && !fi.Mode().IsRegular()) || fi.Mode().Perm()&0o222 != 0 {
			return false
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		return ok && int(st.Uid) == os.Geteuid()
	}
	if !safe(dir, true) {
		return false
	}
	for _, p := range sortedKeys(tree) {
		full := filepath.Join(dir, p)
		for d := filepath.Dir(full); d != dir; d = filepath.Dir(d) {
			if !safe(d, true) {
				return false
			}
		}
		if !safe(full, false) {
			return false
		}
		if b, err := os.ReadFile(full); err != nil || !bytes.Equal(b, tree[p]) {
			return false
		}
	}
	return true
}

// Install returns reg with the module path of dir (from Materialise) added to every python and node
// interpreter: PYTHONPATH and NODE_PATH list the in-sandbox mount first and the host path second (the
// latter is what a block sees without a private root, or with the sandbox off; a missing entry is
// ignored by both interpreters). NODE_PATH also lists the system module directories, where Debian's
// node-yaml and npm's global packages live, for the `yaml` package the node module needs. A variable an
// interpreter entry already sets (trip2g's interpreters.json sets NODE_PATH) keeps its value first.
func Install(reg *interp.Registry, dir string) *interp.Registry {
	py := join(sandbox.SharedMount+"/python", dir+"/python")
	node := join(sandbox.SharedMount+"/node", dir+"/node", "/usr/share/nodejs", "/usr/lib/node_modules")
	for _, in := range reg.Interpreters() {
		switch kind(in) {
		case "python":
			reg = reg.WithPathEnv(in.Name, "PYTHONPATH", py)
		case "node":
			reg = reg.WithPathEnv(in.Name, "NODE_PATH", node)
		}
	}
	return reg
}

// kind classifies an interpreter entry by its labels, so an operator's registry with other names works.
func kind(in interp.Interpreter) string {
	for _, l := range in.Labels {
		switch l {
		case "python", "py", "python3":
			return "python"
		case "node", "js", "javascript":
			return "node"
		}
	}
	return ""
}

func join(parts ...string) string { return strings.Join(parts, ":") }

func sortedKeys(m map[string][]byte) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
