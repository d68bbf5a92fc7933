package cgroup

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/codellm/codellm/internal/sandbox/hook"
)

// v1Wanted are the v1 controllers codellm uses, in the order their
// hierarchies are created and joined. memory and pids are required (threat
// model A: run-wide memory and task limits); cpu, cpuacct and freezer
// improve the service but their absence only degrades it (noted in Info).
var v1Wanted = []string{"memory", "pids", "cpu", "cpuacct", "freezer"}

// hier is one hierarchy codellm creates groups in: the single unified
// hierarchy on v2, one mount per (set of co-mounted) controller(s) on v1.
type hier struct {
	ctrls []string // v1: controllers used from this mount; v2: enabled controllers
	base  string   // absolute directory under which run groups are made
	rel   string   // base as a cgroup path, as it appears in /proc/<pid>/cgroup
	id    int      // hierarchy id as in /proc/<pid>/cgroup (0 on v2)
}

// Host is the usable cgroup hierarchy of this machine. It is immutable after
// Detect and safe for concurrent use.
type Host struct {
	version     int
	hiers       []hier
	controllers []string
	// index into hiers per controller, -1 when absent (v2: 0 or -1)
	mem, pids, cpu, cpuacct, freezer int
	memsw                            bool // v1: memory.memsw.* present (swap accounted)
	setUseHierarchy                  bool // v1: parent has use_hierarchy=0, set it on each run group
	notes                            []string
	err                              error
}

// Info describes the chosen hierarchy (or why none is usable).
func (h *Host) Info() Info {
	in := Info{Version: h.version, Controllers: slices.Clone(h.controllers), Notes: slices.Clone(h.notes)}
	if h.err != nil {
		in.Err = h.err.Error()
	}
	if len(h.hiers) > 0 {
		in.Path = h.hiers[0].base
	}
	return in
}

var detectOnce = sync.OnceValues(func() (*Host, error) {
	return detectFrom(detectConfig{
		mountinfo: "/proc/self/mountinfo",
		cgroup:    "/proc/self/cgroup",
		pid:       os.Getpid(),
	})
})

// Detect finds the usable cgroup hierarchy: cgroup v2 when the process's own
// v2 cgroup offers memory and pids and is writable, else cgroup v1 when the
// memory and pids hierarchies are mounted and writable. Run groups are
// created below the process's own cgroup, so any limit the operator put on
// codellm itself still bounds all runs together.
//
// On v2, enabling controllers for child groups requires the own cgroup to
// hold no processes (the "no internal processes" rule); if it holds this
// process, Detect moves the process into the leaf "<own>/supervisor" and
// creates runs as its siblings. Other processes in the own cgroup are not
// touched; their presence makes v2 unusable and the error says so.
//
// The result is computed once per process and cached. When no hierarchy is
// usable, Detect returns a non-nil Host whose Info explains why (for
// `codellm doctor`) together with an error wrapping ErrUnavailable.
func Detect() (*Host, error) { return detectOnce() }

type detectConfig struct {
	mountinfo string // path of a mountinfo file
	cgroup    string // path of a /proc/<pid>/cgroup file
	pid       int    // process to move into the v2 supervisor leaf
}

func detectFrom(cfg detectConfig) (*Host, error) {
	mounts, err := readMountinfo(cfg.mountinfo)
	if err != nil {
		return unavailable(err.Error(), err.Error())
	}
	cgs, err := readProcCgroup(cfg.cgroup)
	if err != nil {
		return unavailable(err.Error(), err.Error())
	}
	h, why2 := detectV2(mounts, cgs, cfg.pid)
	if h != nil {
		return h, nil
	}
	h, why1 := detectV1(mounts, cgs)
	if h != nil {
		h.notes = append([]string{"cgroup v2 not used: " + why2}, h.notes...)
		return h, nil
	}
	return unavailable(why2, why1)
}

func unavailable(v2, v1 string) (*Host, error) {
	err := &UnavailableError{V2: v2, V1: v1}
	return &Host{mem: -1, pids: -1, cpu: -1, cpuacct: -1, freezer: -1, err: err}, err
}

// mountEntry is the part of a /proc/self/mountinfo line we need.
type mountEntry struct {
	root, point, fstype string
	superOpts           []string
}

// cgEntry is one line of /proc/<pid>/cgroup: "id:controllers:path".
type cgEntry struct {
	id          int
	controllers []string
	path        string
}

func readMountinfo(path string) ([]mountEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseMountinfo(f)
}

// parseMountinfo keeps cgroup and cgroup2 mounts. Format (proc(5)):
// "id parent maj:min root mountpoint opts [optional...] - fstype source superopts".
func parseMountinfo(r io.Reader) ([]mountEntry, error) {
	var out []mountEntry
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if sep < 6 || len(fields) < sep+3 {
			continue // malformed or truncated line: not ours to judge
		}
		fstype := fields[sep+1]
		if fstype != "cgroup" && fstype != "cgroup2" {
			continue
		}
		out = append(out, mountEntry{
			root:      hook.UnescapeMount(fields[3]),
			point:     hook.UnescapeMount(fields[4]),
			fstype:    fstype,
			superOpts: strings.Split(fields[sep+3], ","),
		})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading mountinfo: %w", err)
	}
	return out, nil
}

func readProcCgroup(path string) ([]cgEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseProcCgroup(f)
}

func parseProcCgroup(r io.Reader) ([]cgEntry, error) {
	var out []cgEntry
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			return nil, fmt.Errorf("malformed /proc/self/cgroup line %q", line)
		}
		id, err := strconv.Atoi(parts[0])
		if err != nil {
			return nil, fmt.Errorf("malformed /proc/self/cgroup line %q", line)
		}
		var ctrls []string
		if parts[1] != "" {
			ctrls = strings.Split(parts[1], ",")
		}
		out = append(out, cgEntry{id: id, controllers: ctrls, path: parts[2]})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading /proc/self/cgroup: %w", err)
	}
	return out, nil
}

// resolve maps a cgroup path to a directory through one of the mounts of its
// hierarchy: the mount's root must be a prefix of the path (bind mounts and
// containers mount sub-trees).
func resolve(cgPath string, mounts []mountEntry) (dir string, ok bool) {
	best := -1
	for i, m := range mounts {
		if !pathWithin(cgPath, m.root) {
			continue
		}
		if best < 0 || len(m.root) > len(mounts[best].root) {
			best = i
		}
	}
	if best < 0 {
		return "", false
	}
	m := mounts[best]
	rest := strings.TrimPrefix(cgPath, m.root)
	return filepath.Join(m.point, rest), true
}

// pathWithin reports whether p equals root or lies below it.
func pathWithin(p, root string) bool {
	if root == "/" {
		return strings.HasPrefix(p, "/")
	}
	return p == root || strings.HasPrefix(p, root+"/")
}

func detectV2(mounts []mountEntry, cgs []cgEntry, pid int) (*Host, string) {
	var own *cgEntry
	for i := range cgs {
		if cgs[i].id == 0 && len(cgs[i].controllers) == 0 {
			own = &cgs[i]
		}
	}
	if own == nil {
		return nil, "the process has no unified-hierarchy entry (0::) in /proc/self/cgroup"
	}
	var v2m []mountEntry
	for _, m := range mounts {
		if m.fstype == "cgroup2" {
			v2m = append(v2m, m)
		}
	}
	if len(v2m) == 0 {
		return nil, "no cgroup2 filesystem is mounted (mount -t cgroup2 none /sys/fs/cgroup)"
	}
	if strings.Contains(own.path, "/..") {
		return nil, fmt.Sprintf("own cgroup %q lies outside this cgroup namespace", own.path)
	}
	dir, ok := resolve(own.path, v2m)
	if !ok {
		return nil, fmt.Sprintf("own cgroup %q is not visible under any cgroup2 mount", own.path)
	}
	avail, err := readWords(dir + "/cgroup.controllers")
	if err != nil {
		return nil, fmt.Sprintf("cannot read %s/cgroup.controllers: %v", dir, err)
	}
	var missing []string
	for _, c := range []string{"memory", "pids"} {
		if !slices.Contains(avail, c) {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Sprintf("controllers %s not available in %s (have: %q): on a hybrid host they are bound to cgroup v1; otherwise enable them in the parent's cgroup.subtree_control or run under systemd with Delegate=yes",
			strings.Join(missing, ","), dir, strings.Join(avail, " "))
	}
	if err := unix.Access(dir, unix.W_OK); err != nil {
		return nil, fmt.Sprintf("%s is not delegated to uid %d (no write access: %v); %s", dir, os.Geteuid(), err, delegateFix(v2m[0].point))
	}
	if err := unix.Access(dir+"/cgroup.subtree_control", unix.W_OK); err != nil {
		return nil, fmt.Sprintf("%s is not delegated to uid %d (no write access to its cgroup.subtree_control: %v); %s", dir, os.Geteuid(), err, delegateFix(v2m[0].point))
	}
	var notes []string
	want := []string{"memory", "pids"}
	if slices.Contains(avail, "cpu") {
		want = append(want, "cpu")
	} else {
		notes = append(notes, "cgroup v2: cpu controller not delegated to "+dir+": CPU quotas unavailable (CPU time is still measured)")
	}
	moved, err := enableSubtree(dir, want, pid)
	if err != nil {
		return nil, err.Error()
	}
	if moved {
		notes = append(notes, fmt.Sprintf("cgroup v2: moved pid %d into %s/%s so %s can delegate controllers", pid, dir, reservedName, dir))
	}
	h := newV2Host(dir, own.path, want)
	h.notes = append(h.notes, notes...)
	return h, ""
}

// delegateFix is how an operator hands codellm a cgroup v2 subtree of the
// hierarchy mounted at mnt: systemd's delegation, or by hand as root.
func delegateFix(mnt string) string {
	uid := os.Geteuid()
	return fmt.Sprintf("fix: run codellm as a systemd service with Delegate=yes (in the unit, or "+
		"systemd-run --property=Delegate=yes --uid=%d --pty codellm serve), "+
		"or, as root, hand it a subtree: mkdir %[2]s/codellm; echo '+memory +pids +cpu' > %[2]s/cgroup.subtree_control; "+
		"chown -R %[1]d %[2]s/codellm; then start codellm from a shell moved into it (echo $$ > %[2]s/codellm/cgroup.procs)", uid, mnt)
}

// newV2Host builds a v2 Host creating groups under dir, with the given
// controllers already enabled in dir's cgroup.subtree_control.
func newV2Host(dir, rel string, ctrls []string) *Host {
	h := &Host{
		version:     2,
		hiers:       []hier{{ctrls: ctrls, base: dir, rel: rel, id: 0}},
		controllers: slices.Clone(ctrls),
		mem:         -1, pids: -1, cpu: -1, cpuacct: -1, freezer: -1,
	}
	if slices.Contains(ctrls, "memory") {
		h.mem = 0
	}
	if slices.Contains(ctrls, "pids") {
		h.pids = 0
	}
	if slices.Contains(ctrls, "cpu") {
		h.cpu = 0
	}
	// cpu.stat usage and cgroup.freeze are core v2 files: always present.
	h.cpuacct, h.freezer = 0, 0
	return h
}

// detectWrite is the cgroupfs write used by enableSubtree. Tests of the
// detection logic on fake trees replace it with an emulation of the
// kernel's "no internal processes" rule, which regular files cannot show.
var detectWrite = writeFile

// enableSubtree makes sure dir delegates ctrls to its children. If dir holds
// processes the kernel refuses (EBUSY, "no internal processes"); then pid is
// moved into the leaf dir/supervisor and the write retried once.
func enableSubtree(dir string, ctrls []string, pid int) (moved bool, err error) {
	sc := dir + "/cgroup.subtree_control"
	have, err := readWords(sc)
	if err != nil {
		return false, fmt.Errorf("cannot read %s: %v", sc, err)
	}
	var todo []string
	for _, c := range ctrls {
		if !slices.Contains(have, c) {
			todo = append(todo, "+"+c)
		}
	}
	if len(todo) == 0 {
		return false, nil
	}
	val := strings.Join(todo, " ")
	err = detectWrite(sc, val)
	if errors.Is(err, unix.EBUSY) && pid > 0 {
		leaf := dir + "/" + reservedName
		if e := unix.Mkdir(leaf, 0o755); e != nil && e != unix.EEXIST {
			return false, fmt.Errorf("%s holds processes and the leaf %s cannot be created (%v): start codellm in its own (delegated) cgroup", dir, leaf, e)
		}
		if e := detectWrite(leaf+"/cgroup.procs", strconv.Itoa(pid)); e != nil {
			return false, fmt.Errorf("%s holds processes and pid %d cannot move into %s (%v)", dir, pid, leaf, e)
		}
		moved = true
		err = detectWrite(sc, val)
		if errors.Is(err, unix.EBUSY) {
			others, _ := readPids(dir + "/cgroup.procs")
			return moved, fmt.Errorf("%s still holds other processes %v after moving codellm to %s: cgroup v2 forbids delegating controllers from a cgroup with processes; run codellm alone in its own cgroup (systemd: Delegate=yes)", dir, others, leaf)
		}
	}
	if err != nil {
		return moved, fmt.Errorf("cannot enable %q in %s: %v: run as root or with Delegate=yes", val, sc, err)
	}
	return moved, nil
}

func detectV1(mounts []mountEntry, cgs []cgEntry) (*Host, string) {
	h := &Host{version: 1, mem: -1, pids: -1, cpu: -1, cpuacct: -1, freezer: -1}
	var v1m []mountEntry
	for _, m := range mounts {
		if m.fstype == "cgroup" {
			v1m = append(v1m, m)
		}
	}
	if len(v1m) == 0 {
		return nil, "no cgroup (v1) filesystem is mounted"
	}
	var problems []string
	for _, ctrl := range v1Wanted {
		idx := slices.IndexFunc(cgs, func(e cgEntry) bool { return slices.Contains(e.controllers, ctrl) })
		if idx < 0 {
			problems = append(problems, ctrl+": not in /proc/self/cgroup (controller not mounted)")
			continue
		}
		e := cgs[idx]
		// The mount of this hierarchy carries the same controller set.
		var ms []mountEntry
		for _, m := range v1m {
			if slices.Contains(m.superOpts, ctrl) {
				ms = append(ms, m)
			}
		}
		if strings.Contains(e.path, "/..") {
			problems = append(problems, fmt.Sprintf("%s: own cgroup %q lies outside this cgroup namespace", ctrl, e.path))
			continue
		}
		dir, ok := resolve(e.path, ms)
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: own cgroup %q is not visible under any mount", ctrl, e.path))
			continue
		}
		if err := unix.Access(dir, unix.W_OK); err != nil {
			problems = append(problems, fmt.Sprintf("%s: no write access to %s (%v): run as root", ctrl, dir, err))
			continue
		}
		hi := slices.IndexFunc(h.hiers, func(x hier) bool { return x.id == e.id })
		if hi < 0 {
			h.hiers = append(h.hiers, hier{base: dir, rel: e.path, id: e.id})
			hi = len(h.hiers) - 1
		}
		h.hiers[hi].ctrls = append(h.hiers[hi].ctrls, ctrl)
		h.controllers = append(h.controllers, ctrl)
		switch ctrl {
		case "memory":
			h.mem = hi
		case "pids":
			h.pids = hi
		case "cpu":
			h.cpu = hi
		case "cpuacct":
			h.cpuacct = hi
		case "freezer":
			h.freezer = hi
		}
	}
	if h.mem < 0 || h.pids < 0 {
		return nil, strings.Join(problems, "; ")
	}
	for _, p := range problems {
		h.notes = append(h.notes, "cgroup v1: "+p)
	}
	mb := h.hiers[h.mem].base
	if _, err := os.Stat(mb + "/memory.memsw.limit_in_bytes"); err == nil {
		h.memsw = true
	} else {
		h.notes = append(h.notes, "cgroup v1: swap is not accounted (no memory.memsw.*; boot with swapaccount=1): memory limits bound RAM only")
	}
	if w, err := readWords(mb + "/memory.use_hierarchy"); err == nil && len(w) == 1 && w[0] == "0" {
		h.setUseHierarchy = true
	}
	return h, ""
}

// readWords reads a small interface file and splits it on white space.
func readWords(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(b)), nil
}
