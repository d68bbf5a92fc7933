package sandbox

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WarnWithoutUserNS begins the Report warning of a besteffort sandbox
// whose blocks run without the user namespace the mode wants (the cause,
// what the blocks lose and the fix follow); serve logs it as an error.
const WarnWithoutUserNS = "besteffort: blocks run WITHOUT a user namespace"

// MechanismStatus is one row of the doctor table.
type MechanismStatus struct {
	Name      string `json:"name"`
	Available bool   `json:"available"`
	Version   string `json:"version,omitempty"`
	Used      bool   `json:"used"`
	Detail    string `json:"detail,omitempty"`
}

// Report is the host's mechanism table as seen by the configured mode; it is
// what `codellm doctor` prints and `/readyz` serves as JSON.
type Report struct {
	// Ready is false when the configured mode cannot run on this host
	// (native with a mechanism missing). doctor exits non-zero then.
	Ready      bool              `json:"ready"`
	Mode       Mode              `json:"mode"`
	Kernel     string            `json:"kernel,omitempty"` // uname release, e.g. 6.18.44
	Network    bool              `json:"network"`
	Limits     ReportLimits      `json:"limits"`
	Mechanisms []MechanismStatus `json:"mechanisms"`
	// Missing lists the mechanisms the mode wants but the host lacks.
	Missing []string `json:"missing"`
	// Warnings are human sentences for logs and /readyz (mode off,
	// network enabled, missing mechanisms in besteffort).
	Warnings []string `json:"warnings,omitempty"`
	// Protections are the hardening rules in force beyond the mechanism
	// table (socket families, inode caps, masked /proc files; doctor adds
	// the listener's and the runner's), one "name: detail" line each.
	Protections []string `json:"protections,omitempty"`
	// Features are the kernel facilities codellm probes rather than assumes
	// (close_range, clone3, CLONE_INTO_CGROUP, pidfd, time namespaces, each
	// Landlock ABI): what each gives and what codellm does without it.
	Features []FeatureStatus `json:"features,omitempty"`
	// Determinism says whether deterministic mode (see [Determinism]) can run here.
	Determinism DeterminismStatus `json:"determinism"`
	// Egress is the egress proxy's allow-list (Config.EgressReport); absent without a proxy.
	Egress *EgressReport `json:"egress,omitempty"`
}

// EgressReport describes the egress proxy of Config.Egress: the normalised allow-list, its digest
// (package egress's Policy.Digest) and the per-run caps. It is descriptive only: the proxy enforces.
type EgressReport struct {
	Allow          []string `json:"allow"`
	Digest         string   `json:"digest"`
	MaxConnections int      `json:"max_connections"`
	// MaxProxyConnections is how many connections a run may hold open to the proxy at once.
	MaxProxyConnections int   `json:"max_proxy_connections"`
	MaxBytes            int64 `json:"max_bytes"`
}

// DeterminismStatus is the deterministic-mode row of the report.
type DeterminismStatus struct {
	Supported bool `json:"supported"`
	// Missing names the first piece the host or mode lacks ("" when supported).
	Missing string `json:"missing,omitempty"`
	// Mechanisms are the mechanisms deterministic mode uses, one "what: how" line each.
	Mechanisms []string `json:"mechanisms,omitempty"`
	// NotCovered are what the mode leaves varying on every host (DeterminismNotCovered): no host
	// supplies a mechanism for them, so a request is not refused for them but told here.
	NotCovered []string `json:"not_covered"`
}

// FeatureStatus is one probed kernel facility: Detail says what it gives
// or, when it is missing, why and what codellm does instead.
type FeatureStatus struct {
	Name      string `json:"name"`
	Available bool   `json:"available"`
	Detail    string `json:"detail"`
}

// ReportLimits is the effective default policy in plain units.
type ReportLimits struct {
	MemoryBytes    int64  `json:"memory_bytes"`
	Pids           int    `json:"pids"`
	CPUTime        string `json:"cpu_time"`
	TmpSizeBytes   int64  `json:"tmp_size_bytes"`
	FileSizeBytes  int64  `json:"file_size_bytes"`
	OpenFiles      int    `json:"open_files"`
	HostUID        int    `json:"host_uid"`
	SandboxUID     int    `json:"sandbox_uid"`
	SandboxUser    string `json:"sandbox_user"`
	SandboxHost    string `json:"sandbox_hostname"`
	RunsAsHostRoot bool   `json:"runs_as_host_root"`
}

func (r Report) clone() Report {
	c := r
	c.Mechanisms = append([]MechanismStatus(nil), r.Mechanisms...)
	c.Missing = append([]string{}, r.Missing...)
	c.Warnings = append([]string(nil), r.Warnings...)
	c.Protections = append([]string(nil), r.Protections...)
	c.Features = append([]FeatureStatus(nil), r.Features...)
	c.Determinism.Mechanisms = append([]string(nil), r.Determinism.Mechanisms...)
	return c
}

// JSON returns the report as indented JSON.
func (r Report) JSON() []byte {
	b, _ := json.MarshalIndent(r, "", "  ")
	return b
}

// WriteTable prints the human table of `codellm doctor`.
func (r Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "sandbox mode: %s\tnetwork: %s\tready: %s\tkernel: %s\n", r.Mode, onOff(r.Network), yesNo(r.Ready), dash(r.Kernel))
	fmt.Fprintln(tw, "MECHANISM\tAVAILABLE\tVERSION\tUSED\tDETAIL")
	for _, m := range r.Mechanisms {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", m.Name, yesNo(m.Available), dash(m.Version), yesNo(m.Used), m.Detail)
	}
	if len(r.Missing) > 0 {
		fmt.Fprintf(tw, "missing: %s\n", strings.Join(r.Missing, ", "))
	}
	for _, s := range r.Warnings {
		fmt.Fprintf(tw, "warning: %s\n", s)
	}
	for _, f := range r.Features {
		fmt.Fprintf(tw, "feature: %s: %s: %s\n", f.Name, yesNo(f.Available), f.Detail)
	}
	for _, s := range r.Protections {
		fmt.Fprintf(tw, "protection: %s\n", s)
	}
	if e := r.Egress; e != nil {
		fmt.Fprintf(tw, "egress allow-list: %s (digest %s, %d connections, %d open to the proxy, %d bytes per run)\n",
			strings.Join(e.Allow, ","), e.Digest, e.MaxConnections, e.MaxProxyConnections, e.MaxBytes)
	}
	if r.Determinism.Supported {
		fmt.Fprintf(tw, "deterministic mode: supported (%s)\n", strings.Join(r.Determinism.Mechanisms, "; "))
	} else {
		fmt.Fprintf(tw, "deterministic mode: unavailable, needs %s\n", dash(r.Determinism.Missing))
	}
	if len(r.Determinism.NotCovered) > 0 {
		fmt.Fprintf(tw, "deterministic mode does not cover: %s\n", strings.Join(r.Determinism.NotCovered, "; "))
	}
	return tw.Flush()
}

// String is WriteTable into a string.
func (r Report) String() string {
	var b strings.Builder
	_ = r.WriteTable(&b)
	return b.String()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
