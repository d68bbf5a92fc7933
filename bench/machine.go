package main

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Machine identifies where the numbers came from; results from different machines are not comparable.
type Machine struct {
	CPUModel   string  `json:"cpu_model"`
	Cores      int     `json:"cores"`
	Kernel     string  `json:"kernel"`
	MemMiB     int64   `json:"mem_mib"`
	GoVersion  string  `json:"go_version"`
	LoadBefore float64 `json:"load1_before"`
	LoadAfter  float64 `json:"load1_after"`
	// HostMounts is the length of the harness's mount table. Every block clones the host's mount
	// namespace and detaches the copy at its pivot, so a long table (leaked test mounts: 223 on this
	// machine once) makes every block dearer: with 200 extra mounts codellm used 7 % more CPU per request.
	HostMounts int `json:"host_mounts"`
	// Cgo says whether this harness binary links the C runtime. The spawn row uses the harness itself as
	// the sandbox helper, so a cgo build adds the dynamic loader to every codellm spawn; the release
	// binary is static (CGO_ENABLED=0), and so should the harness be when spawn numbers are quoted.
	Cgo bool `json:"cgo"`
}

func probeMachine() Machine {
	m := Machine{Cores: runtime.NumCPU(), GoVersion: runtime.Version(), CPUModel: "unknown"}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = unix.ByteSliceToString(u.Sysname[:]) + " " + unix.ByteSliceToString(u.Release[:])
	}
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		m.MemMiB = int64(si.Totalram) * int64(si.Unit) >> 20
	}
	m.LoadBefore = load1()
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		m.HostMounts = strings.Count(string(b), "\n")
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, st := range bi.Settings {
			if st.Key == "CGO_ENABLED" && st.Value == "1" {
				m.Cgo = true
			}
		}
	}
	return m
}

// machineBusy is the CPU time every core of the machine spent busy so far (user, nice, system, irq,
// softirq, steal: all but idle and iowait), from the first line of /proc/stat.
func machineBusy() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var ticks int64
	for i, v := range f[1:9] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %w", err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / 100, nil // USER_HZ is 100 on Linux
}

// settle waits until the machine is quiet — less than a tenth of every core's time busy over a tenth of a
// second — or at most settleMax. A row's requests leave work behind them (a closed run's cgroups removed in
// the background, network namespaces torn down in kernel workers, inits exiting after the reply): waiting
// for it before a row's counters are read charges that work to the row that caused it, not to the next row
// (which may be the other system's).
func settle() {
	const window = 100 * time.Millisecond
	for end := time.Now().Add(settleMax); time.Now().Before(end); {
		b0, err := machineBusy()
		if err != nil {
			return
		}
		time.Sleep(window)
		b1, err := machineBusy()
		if err != nil || float64(b1-b0) < 0.1*float64(window)*float64(runtime.NumCPU()) {
			return
		}
	}
}

// settleMax bounds settle on a machine that others keep busy.
const settleMax = 3 * time.Second

// load1 is the one-minute load average: on a shared machine it says how much of the noise is others'.
func load1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}
