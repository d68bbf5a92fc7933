// Package hosts is codellm's host matrix: it boots the kernels and host
// layouts users deploy to under qemu (software emulation, no KVM) and runs
// the native sandbox there — `codellm doctor`, the README's curl example
// through `codellm serve`, and a subset of internal/sandbox's threat-model
// tests on both helpers — or checks that codellm refuses with the precise
// cause where the host cannot run it.
//
// The parts: fetch.sh downloads Debian's kernels and the guest userland
// once into a cache (nothing downloaded is committed), build.sh builds one
// initramfs per architecture with the static codellm and the sandbox's
// test binary, init is the guest's PID 1, and matrix_test.go boots each
// row and judges what the guest printed. TestHostMatrix runs only with
// CODELLM_HOST_MATRIX=1 (.ci/run sets it, after the unit tests); the
// operator guide's "supported hosts" table is rendered from Rows, and
// TestSupportedHostsTable keeps the two equal (go test ./test/hosts
// -update rewrites the table).
package hosts

import (
	"fmt"
	"strings"
)

// Row is one host of the matrix: a kernel and architecture, the cgroup
// layout and user-namespace setting the guest's init makes, what runs there
// and what codellm must answer.
type Row struct {
	Name   string // stable id, the subtest's name
	Arch   string // amd64 or arm64 (GOARCH)
	Kernel string // 6.1 (Debian 12) or 6.12 (Debian 13): fetch.sh's kernel-<Kernel>-<Arch>
	Cgroup string // v2 or v1
	// Delegated hands the service's cgroup v2 subtree to codellm's uid, as
	// systemd's Delegate=yes does; otherwise it stays root's.
	Delegated bool
	UserNS    bool // false: user.max_user_namespaces=0
	// Checks are the guest's checks (init's check_* functions), in order.
	// bench comes right after serve in every row that has it, so the v1 and
	// v2 rows measure it on guests in the same state (nothing but doctor and
	// one serve before it).
	Checks []string
	// Refusal is empty where the native sandbox must be ready; otherwise
	// doctor must fail and print every one of Refusal, and none of Not.
	Refusal []string
	Not     []string
	Host    string // what the row stands for, in the operator guide
}

// Rows is the host matrix.
var Rows = []Row{
	{Name: "amd64-6.1-v2", Arch: "amd64", Kernel: "6.1", Cgroup: "v2", Delegated: true, UserNS: true,
		Checks: []string{"doctor", "serve", "bench", "sandbox", "sandbox-go", "cgroup"},
		Host:   "Debian 12, Ubuntu 22.04+, RHEL 9, any systemd service with `Delegate=yes`"},
	{Name: "amd64-6.12-v2", Arch: "amd64", Kernel: "6.12", Cgroup: "v2", Delegated: true, UserNS: true,
		Checks: []string{"doctor", "serve", "sandbox", "sandbox-go", "cgroup"},
		Host:   "Debian 13, Fedora, current distributions under systemd with `Delegate=yes`"},
	{Name: "amd64-6.12-v2-undelegated", Arch: "amd64", Kernel: "6.12", Cgroup: "v2", Delegated: false, UserNS: true,
		Checks: []string{"doctor"}, Refusal: []string{"is not delegated to uid 1000", "systemd-run --property=Delegate=yes"}, Not: []string{"max_user_namespaces"},
		Host: "a service or container whose cgroup is not delegated to codellm's user"},
	{Name: "amd64-6.1-v1", Arch: "amd64", Kernel: "6.1", Cgroup: "v1", Delegated: false, UserNS: true,
		Checks: []string{"doctor", "serve", "bench", "cgroup"},
		Host:   "hosts booted with cgroup v1 (`systemd.unified_cgroup_hierarchy=0`), codellm as root"},
	{Name: "amd64-6.12-nouserns", Arch: "amd64", Kernel: "6.12", Cgroup: "v2", Delegated: true, UserNS: false,
		Checks: []string{"doctor"}, Refusal: []string{"userns", "user.max_user_namespaces"},
		Host: "user namespaces switched off (`user.max_user_namespaces=0`)"},
	{Name: "arm64-6.1-v2", Arch: "arm64", Kernel: "6.1", Cgroup: "v2", Delegated: true, UserNS: true,
		Checks: []string{"doctor", "serve", "sandbox", "sandbox-go", "rawchild", "cgroup"},
		Host:   "arm64 (Graviton, Ampere) Debian 12 under systemd with `Delegate=yes`"},
}

// cmdline is the row's part of the guest kernel's command line (init reads
// hosts.*).
func (r Row) cmdline() string {
	deleg, userns := "no", "on"
	if r.Delegated {
		deleg = "yes"
	}
	if !r.UserNS {
		userns = "off"
	}
	return fmt.Sprintf("hosts.row=%s hosts.cgroup=%s hosts.deleg=%s hosts.userns=%s hosts.checks=%s",
		r.Name, r.Cgroup, deleg, userns, strings.Join(r.Checks, ","))
}

// guideTable renders Rows as the operator guide's "supported hosts" table.
func guideTable() string {
	var b strings.Builder
	b.WriteString("| host | kernel | arch | cgroup | codellm's answer | checked in the guest |\n")
	b.WriteString("|---|---|---|---|---|---|\n")
	for _, r := range Rows {
		cg := r.Cgroup
		switch {
		case r.Cgroup == "v2" && r.Delegated:
			cg += ", delegated"
		case r.Cgroup == "v2":
			cg += ", not delegated"
		}
		if !r.UserNS {
			cg += "; no user namespaces"
		}
		answer := "native ready"
		if len(r.Refusal) > 0 {
			answer = "refuses, naming " + quoteAll(r.Refusal)
		}
		fmt.Fprintf(&b, "| %s | Debian %s | %s | %s | %s | %s |\n", r.Host, r.Kernel, r.Arch, cg, answer, checksText(r.Checks))
	}
	return b.String()
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = "`" + s + "`"
	}
	return strings.Join(q, " and ")
}

var checkText = map[string]string{
	"doctor":     "`codellm doctor`",
	"serve":      "the README's curl example through `codellm serve`, nothing left after it",
	"sandbox":    "threat-model tests (raw helper)",
	"sandbox-go": "threat-model tests (Go helper)",
	"cgroup":     "package cgroup's tests",
	"rawchild":   "package rawchild's tests (the raw helper's own code)",
	"bench":      "bench's spawn row (CPU per block, v1 against v2)",
}

func checksText(checks []string) string {
	out := make([]string, len(checks))
	for i, c := range checks {
		out[i] = checkText[c]
	}
	return strings.Join(out, "; ")
}
