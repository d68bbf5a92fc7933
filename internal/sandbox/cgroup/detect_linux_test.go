package cgroup

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// fakeTree builds a directory tree standing in for cgroupfs plus the
// mountinfo and /proc/self/cgroup files describing it, so detection logic
// can be tested for host layouts this machine does not have.
type fakeTree struct {
	t    *testing.T
	root string
	mi   []string
	cg   []string
}

func newFakeTree(t *testing.T) *fakeTree {
	return &fakeTree{t: t, root: t.TempDir()}
}

func (f *fakeTree) mount(fstype, root, point, superOpts string) string {
	dir := filepath.Join(f.root, point)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		f.t.Fatal(err)
	}
	// Spaces in mount points are octal-escaped by the kernel.
	esc := strings.ReplaceAll(dir, " ", `\040`)
	f.mi = append(f.mi, "30 22 0:27 "+root+" "+esc+" rw,relatime shared:7 - "+fstype+" "+fstype+" "+superOpts)
	return dir
}

func (f *fakeTree) file(path, content string) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fakeTree) detect() (*Host, error) {
	mi := filepath.Join(f.root, "mountinfo")
	cg := filepath.Join(f.root, "cgroup")
	// Unrelated mounts must be ignored.
	lines := append([]string{"22 1 0:21 / /sys rw - sysfs sysfs rw", "garbage"}, f.mi...)
	f.file(mi, strings.Join(lines, "\n")+"\n")
	f.file(cg, strings.Join(f.cg, "\n")+"\n")
	return detectFrom(detectConfig{mountinfo: mi, cgroup: cg, pid: 0})
}

func TestParseMountinfo(t *testing.T) {
	in := `22 1 0:21 / /sys rw,nosuid - sysfs sysfs rw
30 22 0:27 / /sys/fs/cgroup/my\040dir rw,relatime shared:5 master:1 - cgroup2 cgroup2 rw,nsdelegate
31 22 0:28 /docker/abc /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
32 22 0:29 / /short rw
`
	ms, err := parseMountinfo(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 {
		t.Fatalf("got %d cgroup mounts: %+v", len(ms), ms)
	}
	if ms[0].point != "/sys/fs/cgroup/my dir" || ms[0].fstype != "cgroup2" || ms[0].root != "/" {
		t.Errorf("v2 mount %+v", ms[0])
	}
	if ms[1].root != "/docker/abc" || !slices.Equal(ms[1].superOpts, []string{"rw", "cpu", "cpuacct"}) {
		t.Errorf("v1 mount %+v", ms[1])
	}
}

func TestParseProcCgroup(t *testing.T) {
	es, err := parseProcCgroup(strings.NewReader("4:memory:/a/b\n3:cpu,cpuacct:/\n1:name=systemd:/x:y\n0::/svc\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 4 || es[0].path != "/a/b" || !slices.Equal(es[1].controllers, []string{"cpu", "cpuacct"}) || es[2].path != "/x:y" || es[3].id != 0 || es[3].controllers != nil {
		t.Errorf("parsed %+v", es)
	}
	for _, bad := range []string{"nonsense\n", "x:memory:/\n"} {
		if _, err := parseProcCgroup(strings.NewReader(bad)); err == nil {
			t.Errorf("parseProcCgroup(%q) accepted", bad)
		}
	}
}

func TestResolve(t *testing.T) {
	ms := []mountEntry{{root: "/", point: "/m/all"}, {root: "/docker/abc", point: "/m/ctr"}}
	for _, c := range []struct{ path, want string }{
		{"/", "/m/all"},
		{"/a/b", "/m/all/a/b"},
		{"/docker/abc", "/m/ctr"},
		{"/docker/abc/run", "/m/ctr/run"},
		{"/docker/abcdef", "/m/all/docker/abcdef"},
	} {
		if got, ok := resolve(c.path, ms); !ok || got != c.want {
			t.Errorf("resolve(%q) = %q, %v; want %q", c.path, got, ok, c.want)
		}
	}
	if _, ok := resolve("/other", ms[1:]); ok {
		t.Error("resolved a path outside the mount root")
	}
}

func TestDetectPureV2Delegated(t *testing.T) {
	f := newFakeTree(t)
	mnt := f.mount("cgroup2", "/", "sys/fs/cgroup", "rw,nsdelegate")
	own := filepath.Join(mnt, "system.slice", "codellm.service")
	f.file(own+"/cgroup.controllers", "cpuset cpu io memory pids\n")
	f.file(own+"/cgroup.subtree_control", "")
	f.cg = []string{"0::/system.slice/codellm.service"}
	h, err := f.detect()
	if err != nil {
		t.Fatal(err)
	}
	in := h.Info()
	if in.Version != 2 || in.Path != own || !slices.Equal(in.Controllers, []string{"memory", "pids", "cpu"}) {
		t.Fatalf("info %+v", in)
	}
	if h.hiers[0].rel != "/system.slice/codellm.service" {
		t.Errorf("rel %q", h.hiers[0].rel)
	}
	// Controllers were delegated to the run groups to come.
	if got := readFileString(t, own+"/cgroup.subtree_control"); got != "+memory +pids +cpu" {
		t.Errorf("subtree_control written %q", got)
	}
}

func TestDetectV2AlreadyDelegatedWithoutCPU(t *testing.T) {
	f := newFakeTree(t)
	mnt := f.mount("cgroup2", "/", "cg", "rw")
	f.file(mnt+"/cgroup.controllers", "memory pids\n")
	f.file(mnt+"/cgroup.subtree_control", "memory pids\n")
	f.cg = []string{"0::/"}
	h, err := f.detect()
	if err != nil {
		t.Fatal(err)
	}
	in := h.Info()
	if in.Version != 2 || !slices.Equal(in.Controllers, []string{"memory", "pids"}) || h.cpu >= 0 {
		t.Fatalf("info %+v", in)
	}
	if !slices.ContainsFunc(in.Notes, func(s string) bool { return strings.Contains(s, "cpu controller") }) {
		t.Errorf("missing cpu note: %v", in.Notes)
	}
	if got := readFileString(t, mnt+"/cgroup.subtree_control"); got != "memory pids" {
		t.Errorf("subtree_control rewritten although already delegated: %q", got)
	}
	if _, err := h.NewGroup("x", Limits{CPUs: 1}); !errors.Is(err, ErrNotSupported) {
		t.Errorf("CPU quota without cpu controller: %v", err)
	}
}

func TestDetectHybridFallsBackToV1(t *testing.T) {
	f := newFakeTree(t)
	uni := f.mount("cgroup2", "/", "cg/unified", "rw")
	f.file(uni+"/cgroup.controllers", "hugetlb\n")
	f.file(uni+"/cgroup.subtree_control", "")
	mem := f.mount("cgroup", "/", "cg/memory", "rw,memory")
	f.file(mem+"/api/7/memory.memsw.limit_in_bytes", "")
	f.file(mem+"/api/7/memory.use_hierarchy", "0\n")
	f.mount("cgroup", "/", "cg/pids", "rw,pids")
	cpu := f.mount("cgroup", "/", "cg/cpu,cpuacct", "rw,cpu,cpuacct")
	f.mount("cgroup", "/", "cg/systemd", "rw,name=systemd")
	f.cg = []string{"9:name=systemd:/", "5:memory:/api/7", "4:pids:/", "3:cpu,cpuacct:/", "0::/"}
	h, err := f.detect()
	if err != nil {
		t.Fatal(err)
	}
	in := h.Info()
	if in.Version != 1 || in.Path != mem+"/api/7" {
		t.Fatalf("info %+v", in)
	}
	if !slices.Equal(in.Controllers, []string{"memory", "pids", "cpu", "cpuacct"}) {
		t.Errorf("controllers %v", in.Controllers)
	}
	// cpu and cpuacct share one hierarchy: one directory per run, not two.
	if len(h.hiers) != 3 || h.cpu != h.cpuacct || h.hiers[h.cpu].base != cpu {
		t.Errorf("hierarchies %+v", h.hiers)
	}
	if !h.memsw || !h.setUseHierarchy || h.freezer >= 0 {
		t.Errorf("memsw=%v setUseHierarchy=%v freezer=%d", h.memsw, h.setUseHierarchy, h.freezer)
	}
	notes := strings.Join(in.Notes, "\n")
	for _, want := range []string{"cgroup v2 not used", "memory,pids not available", "freezer"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q: %s", want, notes)
		}
	}
}

func TestDetectV1InContainerAndWithoutSwapAccounting(t *testing.T) {
	f := newFakeTree(t)
	mem := f.mount("cgroup", "/docker/abc", "cg/memory", "rw,memory")
	f.mount("cgroup", "/docker/abc", "cg/pids", "rw,pids")
	f.file(mem+"/inner/memory.use_hierarchy", "1\n")
	if err := os.MkdirAll(filepath.Join(f.root, "cg/pids/inner"), 0o755); err != nil {
		t.Fatal(err)
	}
	f.cg = []string{"5:memory:/docker/abc/inner", "4:pids:/docker/abc/inner"}
	h, err := f.detect()
	if err != nil {
		t.Fatal(err)
	}
	if h.version != 1 || h.Info().Path != mem+"/inner" || h.hiers[h.pids].rel != "/docker/abc/inner" {
		t.Fatalf("host %+v", h)
	}
	if h.memsw || h.setUseHierarchy {
		t.Errorf("memsw=%v setUseHierarchy=%v", h.memsw, h.setUseHierarchy)
	}
	if !slices.ContainsFunc(h.Info().Notes, func(s string) bool { return strings.Contains(s, "swap is not accounted") }) {
		t.Errorf("notes %v", h.Info().Notes)
	}
}

func TestDetectNothingUsableExplains(t *testing.T) {
	f := newFakeTree(t)
	mnt := f.mount("cgroup2", "/", "cg", "rw")
	f.file(mnt+"/app/cgroup.controllers", "cpu memory\n")
	f.file(mnt+"/app/cgroup.subtree_control", "")
	f.cg = []string{"0::/app"}
	h, err := f.detect()
	var ue *UnavailableError
	if !errors.As(err, &ue) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v, want *UnavailableError", err)
	}
	if !strings.Contains(ue.V2, "pids") || !strings.Contains(ue.V2, "Delegate=yes") || !strings.Contains(ue.V2, mnt+"/app") {
		t.Errorf("v2 reason %q does not say what is missing where and how to fix it", ue.V2)
	}
	if !strings.Contains(ue.V1, "no cgroup (v1) filesystem") {
		t.Errorf("v1 reason %q", ue.V1)
	}
	if h == nil || h.Info().Version != 0 || h.Info().Err != err.Error() {
		t.Fatalf("host for doctor: %+v", h)
	}
	if _, err := h.NewGroup("x", Limits{}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("NewGroup on unusable host: %v", err)
	}
}

func TestDetectRejectsEscapedNamespaceAndMissingV1Pids(t *testing.T) {
	f := newFakeTree(t)
	f.mount("cgroup2", "/", "cg", "rw")
	mem := f.mount("cgroup", "/", "cg1/memory", "rw,memory")
	f.file(mem+"/memory.use_hierarchy", "1\n")
	f.cg = []string{"4:memory:/", "0::/../../outside"}
	_, err := f.detect()
	var ue *UnavailableError
	if !errors.As(err, &ue) {
		t.Fatalf("err = %v", err)
	}
	if !strings.Contains(ue.V2, "outside this cgroup namespace") {
		t.Errorf("v2 reason %q", ue.V2)
	}
	if !strings.Contains(ue.V1, "pids") {
		t.Errorf("v1 reason %q", ue.V1)
	}
}

func TestDetectMissingProcFiles(t *testing.T) {
	_, err := detectFrom(detectConfig{mountinfo: "/nonexistent/mountinfo", cgroup: "/nonexistent/cgroup"})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "/nonexistent/mountinfo") {
		t.Fatalf("err = %v", err)
	}
}

// emulateNoInternalProcesses replaces detectWrite with the kernel's v2
// rule on a fake tree: enabling controllers in subtree_control fails with
// EBUSY while the cgroup's cgroup.procs lists processes, and writing a pid
// to a cgroup.procs moves it there from its sibling parent.
func emulateNoInternalProcesses(t *testing.T) {
	old := detectWrite
	t.Cleanup(func() { detectWrite = old })
	detectWrite = func(path, val string) error {
		dir := filepath.Dir(path)
		switch filepath.Base(path) {
		case "cgroup.subtree_control":
			if b, _ := os.ReadFile(dir + "/cgroup.procs"); len(strings.TrimSpace(string(b))) > 0 {
				return &fs.PathError{Op: "write", Path: path, Err: unix.EBUSY}
			}
		case "cgroup.procs":
			parent := filepath.Dir(dir) + "/cgroup.procs"
			b, _ := os.ReadFile(parent)
			var keep []string
			for _, p := range strings.Fields(string(b)) {
				if p != val {
					keep = append(keep, p)
				}
			}
			if err := os.WriteFile(parent, []byte(strings.Join(keep, "\n")), 0o644); err != nil {
				return err
			}
		}
		return os.WriteFile(path, []byte(val), 0o644)
	}
}

func TestDetectV2MovesItselfIntoSupervisorLeaf(t *testing.T) {
	emulateNoInternalProcesses(t)
	f := newFakeTree(t)
	mnt := f.mount("cgroup2", "/", "cg", "rw")
	own := mnt + "/codellm.service"
	f.file(own+"/cgroup.controllers", "memory pids cpu\n")
	f.file(own+"/cgroup.subtree_control", "")
	f.file(own+"/cgroup.procs", "4242\n")
	f.cg = []string{"0::/codellm.service"}
	mi, cg := filepath.Join(f.root, "mountinfo"), filepath.Join(f.root, "cgroup")
	f.file(mi, strings.Join(f.mi, "\n")+"\n")
	f.file(cg, strings.Join(f.cg, "\n")+"\n")
	h, err := detectFrom(detectConfig{mountinfo: mi, cgroup: cg, pid: 4242})
	if err != nil {
		t.Fatal(err)
	}
	if h.version != 2 || h.Info().Path != own {
		t.Fatalf("info %+v", h.Info())
	}
	if got := readFileString(t, own+"/supervisor/cgroup.procs"); got != "4242" {
		t.Errorf("supervisor procs %q", got)
	}
	if got := readFileString(t, own+"/cgroup.subtree_control"); got != "+memory +pids +cpu" {
		t.Errorf("subtree_control %q", got)
	}
	if !slices.ContainsFunc(h.Info().Notes, func(s string) bool { return strings.Contains(s, "moved pid 4242") }) {
		t.Errorf("notes %v", h.Info().Notes)
	}
}

func TestDetectV2SharedCgroupExplains(t *testing.T) {
	emulateNoInternalProcesses(t)
	f := newFakeTree(t)
	mnt := f.mount("cgroup2", "/", "cg", "rw")
	own := mnt + "/session.scope"
	f.file(own+"/cgroup.controllers", "memory pids\n")
	f.file(own+"/cgroup.subtree_control", "")
	f.file(own+"/cgroup.procs", "4242\n77\n")
	f.cg = []string{"0::/session.scope"}
	mi, cg := filepath.Join(f.root, "mountinfo"), filepath.Join(f.root, "cgroup")
	f.file(mi, strings.Join(f.mi, "\n")+"\n")
	f.file(cg, strings.Join(f.cg, "\n")+"\n")
	_, err := detectFrom(detectConfig{mountinfo: mi, cgroup: cg, pid: 4242})
	var ue *UnavailableError
	if !errors.As(err, &ue) {
		t.Fatalf("err = %v", err)
	}
	if !strings.Contains(ue.V2, "other processes [77]") || !strings.Contains(ue.V2, "Delegate=yes") {
		t.Errorf("v2 reason %q", ue.V2)
	}
}
