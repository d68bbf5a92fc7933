package deploy_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// ---- Kubernetes ----------------------------------------------------------------------------------

type object = map[string]any

// manifests parses every YAML document of every file in deploy/kubernetes, keyed by "Kind/name".
func manifests(t *testing.T) (map[string]object, []string) {
	t.Helper()
	files, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	out := map[string]object{}
	files = slices.DeleteFunc(files, func(f string) bool { return filepath.Base(f) == "kustomization.yaml" })
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(raw))
		for {
			var doc object
			err := dec.Decode(&doc)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if doc == nil {
				continue
			}
			kind, _ := doc["kind"].(string)
			name, _ := get(doc, "metadata", "name").(string)
			if kind == "" || name == "" {
				t.Fatalf("%s: a document without kind or metadata.name", f)
			}
			key := kind + "/" + name
			if _, dup := out[key]; dup {
				t.Fatalf("%s: %s defined twice", f, key)
			}
			out[key] = doc
		}
	}
	return out, files
}

// get walks nested maps; nil when a step is missing.
func get(v any, path ...string) any {
	for _, p := range path {
		m, ok := v.(object)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

func list(v any) []any { l, _ := v.([]any); return l }

// labelsMatch reports whether every selector label is present in labels.
func labelsMatch(selector, labels any) bool {
	sel, _ := selector.(object)
	lab, _ := labels.(object)
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if lab[k] != v {
			return false
		}
	}
	return true
}

// namespacedCaps are the capabilities a root codellm needs to hand each block its directory and user map;
// a pod may keep them only in a user namespace of its own.
var namespacedCaps = []any{"CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID"}

// Every pod codellm ships is unprivileged: no privileged container, no privilege escalation, no added
// capability (all dropped), non-root, no host namespaces or host paths, bounded resources, probes set.
func TestPodsKeepIsolationPromises(t *testing.T) {
	objs, _ := manifests(t)
	deployments := 0
	for key, o := range objs {
		if o["kind"] != "Deployment" {
			continue
		}
		deployments++
		t.Run(key, func(t *testing.T) {
			if !labelsMatch(get(o, "spec", "selector", "matchLabels"), get(o, "spec", "template", "metadata", "labels")) {
				t.Error("spec.selector does not select the pod template's labels")
			}
			pod := get(o, "spec", "template", "spec")
			for _, f := range []string{"hostNetwork", "hostPID", "hostIPC"} {
				if get(pod, f) == true {
					t.Errorf("%s: true", f)
				}
			}
			if get(pod, "automountServiceAccountToken") != false {
				t.Error("automountServiceAccountToken is not false: the pod needs no API access")
			}
			// A pod in its own user namespace (hostUsers: false) may run as that namespace's root: it is an
			// unprivileged uid on the host, and its capabilities act only inside (docs/operator.md §4.3).
			ownUserns := get(pod, "hostUsers") == false
			if get(pod, "securityContext", "runAsNonRoot") != true && !ownUserns {
				t.Error("pod securityContext.runAsNonRoot is not true")
			}
			if uid, ok := get(pod, "securityContext", "runAsUser").(int); !ok || uid == 0 && !ownUserns {
				t.Errorf("pod securityContext.runAsUser = %v, want a non-zero uid", get(pod, "securityContext", "runAsUser"))
			}
			for _, v := range list(get(pod, "volumes")) {
				if get(v, "hostPath") != nil {
					t.Errorf("volume %v is a hostPath", get(v, "name"))
				}
			}
			containers := append(list(get(pod, "containers")), list(get(pod, "initContainers"))...)
			if len(containers) == 0 {
				t.Fatal("no containers")
			}
			for _, c := range containers {
				name := get(c, "name")
				sc := get(c, "securityContext")
				if get(sc, "privileged") == true {
					t.Errorf("container %v is privileged", name)
				}
				if get(sc, "allowPrivilegeEscalation") != false {
					t.Errorf("container %v: allowPrivilegeEscalation is not false", name)
				}
				if get(sc, "readOnlyRootFilesystem") != true {
					t.Errorf("container %v: readOnlyRootFilesystem is not true", name)
				}
				if drop := list(get(sc, "capabilities", "drop")); !slices.Contains(drop, any("ALL")) {
					t.Errorf("container %v: capabilities.drop lacks ALL (%v)", name, drop)
				}
				for _, c := range list(get(sc, "capabilities", "add")) {
					if !ownUserns || !slices.Contains(namespacedCaps, c) {
						t.Errorf("container %v adds capability %v (only %v, and only in a pod's own user namespace)", name, c, namespacedCaps)
					}
				}
				if (get(sc, "runAsUser") == 0 || get(sc, "runAsNonRoot") == false) && !ownUserns {
					t.Errorf("container %v overrides the pod to run as root", name)
				}
				for _, r := range []string{"cpu", "memory"} {
					if get(c, "resources", "limits", r) == nil || get(c, "resources", "requests", r) == nil {
						t.Errorf("container %v: resources.requests/limits.%s not set", name, r)
					}
				}
				if get(c, "readinessProbe") == nil || get(c, "livenessProbe") == nil {
					t.Errorf("container %v: readiness or liveness probe missing", name)
				}
			}
		})
	}
	if deployments < 3 {
		t.Fatalf("found %d Deployments, want codellm, codellm-hub and codellm-redis", deployments)
	}
}

// The codellm serve pod: readiness on /readyz (503 until the sandbox self-test passes and while
// draining), liveness on /healthz, both on the container's port; the sandbox mode is explicit.
func TestCodellmDeployment(t *testing.T) {
	objs, _ := manifests(t)
	d := objs["Deployment/codellm"]
	if d == nil {
		t.Fatal("Deployment/codellm missing")
	}
	c := list(get(d, "spec", "template", "spec", "containers"))[0]
	if args := list(get(c, "args")); len(args) == 0 || args[0] != "serve" {
		t.Errorf("args %v do not run codellm serve", args)
	}
	ports := map[any]any{}
	for _, p := range list(get(c, "ports")) {
		ports[get(p, "name")] = get(p, "containerPort")
	}
	for probe, path := range map[string]string{"readinessProbe": "/readyz", "livenessProbe": "/healthz"} {
		if got := get(c, probe, "httpGet", "path"); got != path {
			t.Errorf("%s path = %v, want %s", probe, got, path)
		}
		port := get(c, probe, "httpGet", "port")
		if port != "http" || ports["http"] == nil {
			t.Errorf("%s port %v is not the container's named http port (%v)", probe, port, ports)
		}
	}
	env := map[string]any{}
	for _, e := range list(get(c, "env")) {
		env[get(e, "name").(string)] = e
	}
	if mode := get(env["CODELLM_SANDBOX"], "value"); mode != "native" {
		t.Errorf("CODELLM_SANDBOX = %v: the shipped manifest must fail closed (native); besteffort is the operator's explicit edit", mode)
	}
	if get(env["CODELLM_API_KEY"], "valueFrom", "secretKeyRef", "name") == nil {
		t.Error("CODELLM_API_KEY does not come from a Secret")
	}
	if get(env["CODELLM_API_KEY"], "value") != nil {
		t.Error("CODELLM_API_KEY is a literal in the manifest")
	}
	// The sandbox's relaxations are the runtime's seccomp and AppArmor profiles, nothing else.
	if get(d, "spec", "template", "spec", "securityContext", "seccompProfile", "type") == nil {
		t.Error("seccompProfile not set explicitly")
	}

	svc := objs["Service/codellm"]
	if svc == nil || !labelsMatch(get(svc, "spec", "selector"), get(d, "spec", "template", "metadata", "labels")) {
		t.Error("Service/codellm does not select the codellm pods")
	}
	hpa := objs["HorizontalPodAutoscaler/codellm"]
	if hpa == nil || get(hpa, "spec", "scaleTargetRef", "kind") != "Deployment" || get(hpa, "spec", "scaleTargetRef", "name") != "codellm" {
		t.Error("HorizontalPodAutoscaler/codellm does not scale Deployment/codellm")
	}
	if lo, hi := get(hpa, "spec", "minReplicas"), get(hpa, "spec", "maxReplicas"); lo == nil || hi == nil || lo.(int) < 1 || hi.(int) < lo.(int) {
		t.Errorf("HPA replicas min %v max %v", lo, hi)
	}
}

// codellm pods have a default-deny egress policy: a policy that selects them, declares Egress and
// allows nothing; and no policy anywhere has an allow-all egress rule.
func TestEgressDefaultDeny(t *testing.T) {
	objs, _ := manifests(t)
	pods := get(objs["Deployment/codellm"], "spec", "template", "metadata", "labels")
	denied := false
	for key, o := range objs {
		if o["kind"] != "NetworkPolicy" {
			continue
		}
		types := list(get(o, "spec", "policyTypes"))
		for _, rule := range list(get(o, "spec", "egress")) {
			if len(list(get(rule, "to"))) == 0 {
				t.Errorf("%s: an egress rule without 'to' allows every destination", key)
			}
		}
		if labelsMatch(get(o, "spec", "podSelector", "matchLabels"), pods) && slices.Contains(types, any("Egress")) &&
			len(list(get(o, "spec", "egress"))) == 0 {
			denied = true
		}
	}
	if !denied {
		t.Error("no NetworkPolicy denies all egress of the codellm pods")
	}
}

// kubectl apply -k applies exactly the files in the directory.
func TestKustomizationListsEveryManifest(t *testing.T) {
	_, files := manifests(t)
	raw, err := os.ReadFile("kubernetes/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `yaml:"resources"`
	}
	if err := yaml.Unmarshal(raw, &k); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if base := filepath.Base(f); !slices.Contains(k.Resources, base) {
			t.Errorf("kustomization.yaml does not list %s", base)
		}
	}
	for _, r := range k.Resources {
		if _, err := os.Stat(filepath.Join("kubernetes", r)); err != nil {
			t.Errorf("kustomization.yaml lists %s: %v", r, err)
		}
	}
}

// ---- Dockerfile ----------------------------------------------------------------------------------

type instruction struct{ cmd, args string }

// dockerfile returns the instructions, continuation lines joined, comments dropped.
func dockerfile(t *testing.T) []instruction {
	t.Helper()
	f, err := os.Open("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []instruction
	var cur strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") || (line == "" && cur.Len() == 0) {
			continue
		}
		if strings.HasSuffix(line, "\\") {
			cur.WriteString(strings.TrimSuffix(line, "\\") + " ")
			continue
		}
		cur.WriteString(line)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, instruction{strings.ToUpper(cmd), strings.Join(strings.Fields(args), " ")})
		cur.Reset()
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestDockerfile(t *testing.T) {
	ins := dockerfile(t)
	var stages [][]instruction
	for _, in := range ins {
		if in.cmd == "FROM" {
			stages = append(stages, nil)
		}
		if len(stages) > 0 {
			stages[len(stages)-1] = append(stages[len(stages)-1], in)
		}
	}
	if len(stages) < 2 {
		t.Fatalf("%d stages, want a multi-stage build", len(stages))
	}
	joined := func(st []instruction, cmd string) string {
		var b strings.Builder
		for _, in := range st {
			if in.cmd == cmd {
				b.WriteString(in.args + "\n")
			}
		}
		return b.String()
	}
	// Every base is named in full (podman and buildah refuse short names), through an ARG whose default
	// is a registry path, so that a build without a registry can point it at a local image.
	args := map[string]string{}
	for _, in := range ins {
		if in.cmd == "ARG" {
			if k, v, ok := strings.Cut(in.args, "="); ok {
				args[k] = v
			}
		}
	}
	for _, st := range stages {
		from := strings.Fields(st[0].args)[0]
		if strings.HasPrefix(from, "${") {
			from = args[strings.Trim(from, "${}")]
		}
		if first, _, _ := strings.Cut(from, "/"); !strings.Contains(first, ".") {
			t.Errorf("FROM %s (%s) is not a fully qualified name (registry/…)", st[0].args, from)
		}
	}
	build, final := stages[0], stages[len(stages)-1]
	if run := joined(build, "RUN"); !strings.Contains(run, "CGO_ENABLED=0 go build -trimpath") || !strings.Contains(run, "./cmd/codellm") {
		t.Errorf("build stage does not run CGO_ENABLED=0 go build -trimpath ./cmd/codellm:\n%s", run)
	}
	if from := final[0].args; !strings.HasPrefix(from, "${BASE_IMAGE}") || !strings.HasPrefix(args["BASE_IMAGE"], "docker.io/library/debian:") ||
		!strings.HasSuffix(args["BASE_IMAGE"], "-slim") {
		t.Errorf("runtime stage FROM %q (BASE_IMAGE %q), want a slim Debian", from, args["BASE_IMAGE"])
	}
	run := joined(final, "RUN")
	for _, pkg := range []string{"python3", "nodejs", "perl", "bash", "ripgrep"} {
		if !slices.Contains(strings.Fields(run), pkg) {
			t.Errorf("runtime stage does not install %s", pkg)
		}
	}
	if !strings.Contains(joined(final, "COPY"), "--from=") {
		t.Error("runtime stage does not copy the binary from the build stage")
	}
	users := strings.Fields(joined(final, "USER"))
	if len(users) == 0 {
		t.Fatal("runtime stage has no USER: the image would run as root")
	}
	if u, _, _ := strings.Cut(users[len(users)-1], ":"); u == "root" || u == "0" {
		t.Errorf("final USER %q is root", users[len(users)-1])
	}
	if hc := joined(final, "HEALTHCHECK"); !strings.Contains(hc, "/readyz") {
		t.Errorf("HEALTHCHECK %q does not probe /readyz", hc)
	}
	entry, cmd := joined(final, "ENTRYPOINT"), joined(final, "CMD")
	if !strings.Contains(entry, "codellm") || strings.TrimSpace(cmd) != `["serve"]` {
		t.Errorf("ENTRYPOINT %q CMD %q, want codellm serve", entry, cmd)
	}
}

func TestDockerignore(t *testing.T) {
	raw, err := os.ReadFile("../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(string(raw))
	for _, want := range []string{".git", "*.test", "**/*.env"} {
		if !slices.Contains(lines, want) {
			t.Errorf(".dockerignore lacks %s", want)
		}
	}
	for _, must := range []string{"go.mod", "go.sum", "cmd", "internal"} {
		if slices.Contains(lines, must) {
			t.Errorf(".dockerignore excludes %s, which the build needs", must)
		}
	}
}

// ---- systemd -------------------------------------------------------------------------------------

// unit parses a unit file into section → key → values (repeated keys accumulate).
func unit(t *testing.T, path string) map[string]map[string][]string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string][]string{}
	section := ""
	for n, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[' && line[len(line)-1] == ']':
			section = line[1 : len(line)-1]
			out[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: not key=value in a section: %q", path, n+1, line)
			}
			out[section][k] = append(out[section][k], v)
		}
	}
	return out
}

func last(vs []string) string {
	if len(vs) == 0 {
		return ""
	}
	return vs[len(vs)-1]
}

// Both units are hardened, unprivileged and delegate a cgroup, and set none of the directives that
// would make the native sandbox refuse every run (each is explained in codellm.service's header).
func TestSystemdUnits(t *testing.T) {
	for file, exec := range map[string]string{
		"systemd/codellm.service":        "/usr/local/bin/codellm serve",
		"systemd/codellm-worker.service": "/usr/local/bin/codellm worker run",
	} {
		t.Run(filepath.Base(file), func(t *testing.T) {
			s := unit(t, file)["Service"]
			if s == nil {
				t.Fatal("no [Service] section")
			}
			if got := last(s["ExecStart"]); got != exec {
				t.Errorf("ExecStart=%q, want %q", got, exec)
			}
			want := map[string]string{
				"Delegate": "yes", "NoNewPrivileges": "yes", "DynamicUser": "yes", "CapabilityBoundingSet": "",
				"ProtectSystem": "strict", "PrivateTmp": "yes", "PrivateDevices": "yes",
			}
			for k, v := range want {
				if vs, ok := s[k]; !ok || last(vs) != v {
					t.Errorf("%s=%q, want %q", k, last(vs), v)
				}
			}
			if strings.Contains(file, "worker") {
				// Exit codes a restart cannot fix (bridge-protocol.md §12) must stop the unit; a quarantine (5)
				// restarts (issue 35 item 2: a unit left down on 5 kept the worker offline for everyone).
				if got := strings.Fields(last(s["RestartPreventExitStatus"])); !slices.Equal(got, []string{"3", "4"}) {
					t.Errorf("RestartPreventExitStatus=%v, want 3 4 (auth, fenced)", got)
				}
				if got := last(s["Restart"]); got != "always" {
					t.Errorf("Restart=%s, want always", got)
				}
			}
			if u := last(s["User"]); u == "root" || u == "0" {
				t.Errorf("User=%s", u)
			}
			// Each of these breaks the sandbox: /proc overmounts (fresh /proc refused), a read-only
			// cgroup, a sethostname filter, a W^X filter inherited by JITs, or no nested user namespace.
			forbidden := map[string][]string{
				"ProtectKernelTunables":  {"yes", "true", "1"},
				"ProtectKernelLogs":      {"yes", "true", "1"},
				"ProtectControlGroups":   {"yes", "true", "1", "strict"},
				"ProtectHostname":        {"yes", "true", "1"},
				"MemoryDenyWriteExecute": {"yes", "true", "1"},
				"PrivateUsers":           {"yes", "true", "1", "self", "identity"},
				"ProtectProc":            {"invisible", "noaccess", "ptraceable"},
				"ProcSubset":             {"pid"},
			}
			for k, bad := range forbidden {
				if v := last(s[k]); slices.Contains(bad, v) {
					t.Errorf("%s=%s breaks the native sandbox", k, v)
				}
			}
			if ns := last(s["RestrictNamespaces"]); ns != "" && ns != "no" && ns != "false" {
				have := strings.Fields(ns)
				for _, need := range []string{"user", "pid", "mnt", "net", "ipc", "uts", "cgroup"} {
					if strings.HasPrefix(ns, "~") || !slices.Contains(have, need) {
						t.Errorf("RestrictNamespaces=%s does not admit %s", ns, need)
					}
				}
			}
			if f := last(s["SystemCallFilter"]); f != "" {
				t.Errorf("SystemCallFilter=%s: a unit-level filter must be reviewed against the sandbox's needs", f)
			}
		})
	}
}

// systemd-analyze verify accepts both units without a single warning. The ExecStart binary is replaced
// by this test binary (the check wants an existing executable); everything else is verified as shipped.
func TestSystemdAnalyzeVerify(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("systemd-analyze not installed: unit files only checked by TestSystemdUnits")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var paths []string
	for _, f := range []string{"systemd/codellm.service", "systemd/codellm-worker.service"} {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.Base(f))
		if err := os.WriteFile(p, bytes.ReplaceAll(raw, []byte("/usr/local/bin/codellm"), []byte(self)), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	// Guard: the verifier does report a unit it cannot parse, so silence below means something.
	bad := filepath.Join(dir, "bad.service")
	if err := os.WriteFile(bad, []byte("[Service]\nExecStart="+self+"\nProtectSystem=sometimes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := verify(t, bad); !strings.Contains(out, "ProtectSystem") && !strings.Contains(out, "protect system") {
		t.Fatalf("systemd-analyze verify does not report a bad value, so it cannot check the units:\n%s", out)
	}
	if out := verify(t, paths...); out != "" {
		t.Errorf("systemd-analyze verify:\n%s", out)
	}
}

func verify(t *testing.T, paths ...string) string {
	t.Helper()
	cmd := exec.Command("systemd-analyze", append([]string{"verify"}, paths...)...)
	cmd.Env = append(os.Environ(), "SYSTEMD_LOG_COLOR=0", "SYSTEMD_PAGER=")
	out, err := cmd.CombinedOutput()
	if err != nil && len(out) == 0 {
		t.Fatalf("systemd-analyze verify: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// ---- operator docs -------------------------------------------------------------------------------

// The guides shipped with the deployment artefacts link to files that exist (relative links only).
func TestDocsLinksResolve(t *testing.T) {
	link := regexp.MustCompile(`\]\(([^)#\s]+)(#[^)]*)?\)`)
	for _, doc := range []string{"operator.md", "role-authors.md", "fleet.md", "librechat.md"} {
		path := filepath.Join("..", "docs", doc)
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(raw), -1) {
			target := m[1]
			if strings.Contains(target, "://") {
				continue
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(path), target)); err != nil {
				t.Errorf("%s links to %s: %v", doc, target, err)
			}
		}
	}
}

// The operator guide's table of what the native sandbox needs from a pod (docs/operator.md §4.3) is what
// the manifests carry: each row names a manifest field and its value, and a manifest without it fails.
func TestManifestsCarryTheGuidesRequirements(t *testing.T) {
	objs, _ := manifests(t)
	raw, err := os.ReadFile("../docs/operator.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, _ := strings.Cut(string(raw), "<!-- kubernetes-requirements -->")
	table, _, _ = strings.Cut(table, "<!-- /kubernetes-requirements -->")
	rowRe := regexp.MustCompile("`([A-Za-z]+/[a-z0-9-]+) ([^`:]+(?:\\[[^\\]]+\\][^`:]*)*): ([^`]+)`\\s*\\|\\s*$")
	rows := 0
	for _, line := range strings.Split(table, "\n") {
		m := rowRe.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		rows++
		obj := objs[m[1]]
		if obj == nil {
			t.Errorf("the guide names %s, which no manifest defines", m[1])
			continue
		}
		var want any
		if err := yaml.Unmarshal([]byte(m[3]), &want); err != nil {
			t.Fatalf("%s %s: value %q: %v", m[1], m[2], m[3], err)
		}
		if got := lookup(obj, m[2]); !sameValue(got, want) {
			t.Errorf("%s %s = %v, the guide requires %v", m[1], m[2], got, want)
		}
	}
	if rows < 8 {
		t.Fatalf("found %d requirement rows in docs/operator.md §4.3", rows)
	}
}

// lookup follows a path of the guide's table: dotted map keys, `key[x]` for the element of a list whose
// name is x (containers, env) or for the map key x (annotations, which contain dots).
func lookup(v any, path string) any {
	for path != "" {
		var seg string
		if i := strings.IndexAny(path, ".["); i < 0 {
			seg, path = path, ""
		} else if path[i] == '.' {
			seg, path = path[:i], path[i+1:]
		} else {
			end := strings.IndexByte(path, ']')
			key, sel := path[:i], path[i+1:end]
			path = strings.TrimPrefix(path[end+1:], ".")
			v = get(v, key)
			if l, ok := v.([]any); ok {
				v = nil
				for _, e := range l {
					if get(e, "name") == sel {
						v = e
					}
				}
			} else {
				v = get(v, sel)
			}
			continue
		}
		if seg != "" {
			v = get(v, seg)
		}
	}
	return v
}

// sameValue compares a manifest value with the guide's: scalars by their text (`"true"` and true differ
// in a manifest, not here: annotations are strings), lists as sets.
func sameValue(got, want any) bool {
	if w, ok := want.([]any); ok {
		g, _ := got.([]any)
		if len(g) != len(w) {
			return false
		}
		for _, x := range w {
			if !slices.Contains(g, x) {
				return false
			}
		}
		return true
	}
	return got != nil && fmt.Sprint(got) == fmt.Sprint(want)
}
