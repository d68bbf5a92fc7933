package sandbox

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Determinism asks for a reproducible block: the same program, input,
// Seed and Now give the same bytes. Each mechanism, and what it covers:
//
//   - Wall clock (CLOCK_REALTIME, gettimeofday, time): libfaketime
//     (LD_PRELOAD of Debian's libfaketime.so.1, FAKETIME="@<Now> i0.001"):
//     the first read returns Now, and every read advances the clock by a
//     fixed 1 ms step, so a program that reads the clock the same number of
//     times sees the same values (measured: python3.11 makes 49 reads before
//     the body, node 20 makes 9; both identical run to run, and date(1)
//     follows). The same FAKETIME is also the block's /etc/faketimerc:
//     bash exports its own getenv, which answers from its variable table,
//     empty at bash's first clock read, so libfaketime found no FAKETIME
//     there and did not fake bash's own clock ($EPOCHSECONDS,
//     $EPOCHREALTIME, printf %(...)T, the seed of $RANDOM); with the file,
//     its fallback, it does (measured; see hook.writeFakeTimeRC). It covers
//     dynamically linked programs only: a statically linked one (Go, musl
//     static) reads the vDSO clock and sees the host's real time.
//   - Monotonic and boot clocks: a time namespace (CLONE_NEWTIME) whose
//     offsets make both read zero when the program starts; they then
//     advance in real time (libfaketime is told to leave them alone,
//     FAKETIME_DONT_FAKE_MONOTONIC=1: a frozen or stepped monotonic clock
//     stops node's timers, measured: setTimeout never fires). A value
//     printed at a resolution coarser than the run's jitter (whole
//     seconds, say) is reproducible; microseconds are not. This covers
//     static programs too (the vDSO honours time namespaces).
//   - File timestamps: NOT reproducible (DeterminismNotCovered). The
//     kernel stamps files with the real clock (time namespaces have no
//     CLOCK_REALTIME offset). Debian's libfaketime is built with FAKE_STAT
//     (it reads NO_FAKE_STAT) but wraps only stat, lstat, fstat and the
//     old __xstat family, shifting what they return by the fake clock's
//     offset; glibc 2.33+ programs call stat64/fstatat64 (python's
//     os.stat, perl), fstatat (find) or statx (coreutils stat and ls;
//     node's libuv through syscall(2)), none of them wrapped. Measured in
//     a deterministic block, for a file it had just written: python
//     os.stat, node fs.statSync/lstatSync, stat -c %Y, ls -l, find
//     -printf %T@ and perl's stat show today's time; date -r, which calls
//     stat, shows Now-1. No mechanism reaches all of these without
//     intercepting the system calls themselves (seccomp user
//     notification, a ptrace-like supervisor), which was not attempted;
//     making statx fail with ENOSYS would move node onto libuv's __xstat64
//     fallback, which libfaketime wraps, but coreutils' and python's
//     paths would stay real.
//   - Randomness, two sources (measured which program takes which, by
//     comparing its bytes with the device's): libfaketime's getrandom()
//     and getentropy() wrappers return a stream of FAKERANDOM_SEED
//     (FakeRandomSeed): python's os.urandom, random, uuid4 and secrets,
//     OpenSSL (node's crypto, randomUUID and, through V8's entropy source,
//     Math.random and the V8 hash seed; openssl rand) and bash 5.2's
//     $SRANDOM call those libc functions. The getrandom system call itself
//     fails with ENOSYS, so what bypasses libc's symbol (glibc's own
//     arc4random, static binaries, syscall(SYS_getrandom)) falls back to
//     the devices. /dev/urandom and /dev/random are one FIFO, read-only
//     (0444, on a read-only bind), that a feeder process (a child of the
//     init, PID 9 or so, in `ps`) keeps full with the ChaCha20 keystream
//     keyed by SHA-256(Seed): one endless stream for the whole block, each
//     open reading on where the last read stopped (od, head -c, open()).
//     A FIFO rather than a file, measured: a file gave every open the same
//     first bytes and EOF at its end (256 KiB). Concurrency: the stream's
//     order is fixed, who reads which part of it is not. Processes that
//     read the devices at the same time split the stream as they are
//     scheduled; and a read returns what the pipe holds, so a buffered
//     reader that reads more than it uses (python's open() takes 4 KiB, od
//     takes what it needs) right after another reader emptied the pipe
//     (64 KiB, refilled at once) may get less, moving what later readers
//     see. Sequential readers of less than the pipe at a time repeat
//     (measured: 8 runs at load 14). A program that only knows the
//     getrandom system call and has no fallback fails instead of running
//     seeded; one that kills the feeder (it runs as the program's uid)
//     gets EOF, and a later open of the device blocks.
//   - Python's hash seed: PYTHONHASHSEED derived from Seed.
//   - Addresses: ASLR off (personality ADDR_NO_RANDOMIZE) for the program
//     and its children: python's id() and /proc/self/maps repeat.
//   - PIDs: the program is PID hook.ProgramPID (32) of its namespace and
//     its children follow in fork order. The init (the helper, PID 1) is a
//     Go program whose runtime starts a varying number of threads, each
//     taking a PID (unpinned the program was PID 8 or 9; pinning
//     ns_last_pid while the helper still had CAP_SYS_ADMIN gave 102-106:
//     threads start later). So the init, just before the program's fork,
//     forks children that exit at once until the last got 31 (the
//     allocator is sequential), with its feeder goroutine already started
//     and parked; no init thread takes a PID after (measured: 32, python child
//     45, 15 runs of testdata/determinism/body.sh). Bash's $RANDOM, seeded
//     from gettimeofday (faked, see the wall clock) and the pid, repeats
//     with them; $SRANDOM comes from the seeded device.
//   - Everything else: the hostname is fixed ("codellm"); user names come
//     from the generated /etc/passwd; umask 022; TZ=UTC, LANG and LC_ALL
//     C.UTF-8; the environment is sorted by name. Directory listing order
//     is the filesystem's (tmpfs lists newest first, so it repeats when a
//     program creates the same files in the same order; a persistent
//     workdir's order is its host filesystem's), and is not controlled.
//     Thread scheduling, and so the interleaving of output written by
//     several threads, is not controlled either.
//
// Only the native platform (own user, PID, mount and time namespaces, a
// private root, seccomp) can honour all of this; Start refuses otherwise
// and names the missing piece. It also refuses a deterministic block that
// could reach a network (ErrDeterministicNetwork): seeded randomness makes
// its TLS keys public to whoever knows the seed.
type Determinism struct {
	Seed string    // any string; the same seed gives the same stream
	Now  time.Time // the wall clock's start (UTC, whole seconds)
}

// DeterminismNotCovered lists what deterministic mode leaves varying on every host, measured on Linux
// 6.18 with Debian 12's libfaketime 0.9.10, glibc 2.36, python 3.11, node 20, coreutils 9.1 (see the
// Determinism doc for why). Native mode refuses a deterministic request when a piece that some hosts
// have is missing here (Start's UnavailableError, the 501 naming it); these pieces no host has, so
// refusing for them would refuse every request: they are reported instead (/readyz, doctor, README).
var DeterminismNotCovered = []string{
	"file timestamps: the kernel's real clock for python os.stat, node fs.statSync, stat(1), ls, find, perl; " +
		"only callers of libc's stat/lstat/fstat (date -r) see them moved onto the fixed clock",
	"statically linked programs' wall clock (vDSO): the real time",
	"monotonic and boot clocks run in real time from zero: sub-second values vary",
	"/dev/urandom and /dev/random (one seeded stream): processes reading them at the same time split it as scheduled",
	"thread interleaving; directory order of a persistent workdir",
}

// FakeTimeLib is the Debian path of libfaketime; deterministic mode needs it.
const FakeTimeLib = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"

// fakeTimeLib is FakeTimeLib for the host's architecture.
func fakeTimeLib() string {
	if runtime.GOARCH == "arm64" {
		return "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1"
	}
	return FakeTimeLib
}

// Key is the 32-byte stream key of the seed.
func (d *Determinism) Key() []byte {
	k := sha256.Sum256([]byte("codellm-determinism-v1\x00" + d.Seed))
	return k[:]
}

// FakeRandomSeed is libfaketime's FAKERANDOM_SEED for the seed: 62 bits of the key with bit 62 set,
// so in [2^62, 2^63). libfaketime parses the variable as a signed 64-bit number, saturating: every
// value from 2^63 up read as 2^63-1, so half of all seeds gave one and the same getrandom stream
// (measured: python's os.urandom, random and uuid4 were identical for seeds "alpha", "s1", "h1",
// "c1" and "c2"); small values gave zero bytes first (0x1, 0x2, 123: 0000000000000000).
func (d *Determinism) FakeRandomSeed() uint64 {
	return binary.LittleEndian.Uint64(d.Key()[8:16])&(1<<62-1) | 1<<62
}

// HashSeed is PYTHONHASHSEED for the seed: 0..4294967295, never "random".
func (d *Determinism) HashSeed() uint32 {
	return binary.LittleEndian.Uint32(d.Key()[:4])
}

// Environ returns env with the deterministic mode's variables set (they
// win over the caller's, except that an existing LD_PRELOAD is kept after
// libfaketime), sorted by name.
func (d *Determinism) Environ(env []string) []string {
	set := map[string]string{
		"FAKETIME":                     d.fakeTime(),
		"FAKETIME_DONT_FAKE_MONOTONIC": "1",
		// libfaketime's getrandom/getentropy wrappers return a stream of this seed: OpenSSL 3 (node) calls
		// getentropy first and, on ENOSYS, refuses a /dev/urandom that is not a device (measured: node
		// aborts in CSPRNG init without it). See FakeRandomSeed for its range.
		"FAKERANDOM_SEED": "0x" + strconv.FormatUint(d.FakeRandomSeed(), 16),
		"PYTHONHASHSEED":  strconv.FormatUint(uint64(d.HashSeed()), 10),
		"TZ":              "UTC",
		"LANG":            "C.UTF-8",
		"LC_ALL":          "C.UTF-8",
		"LD_PRELOAD":      fakeTimeLib(),
	}
	out := make([]string, 0, len(env)+len(set))
	for _, e := range env {
		name, val, _ := strings.Cut(e, "=")
		if name == "LD_PRELOAD" && val != "" {
			set[name] += ":" + val
			continue
		}
		if _, ours := set[name]; ours {
			continue
		}
		out = append(out, e)
	}
	for k, v := range set {
		out = append(out, k+"="+v)
	}
	slices.SortFunc(out, func(a, b string) int {
		an, _, _ := strings.Cut(a, "=")
		bn, _, _ := strings.Cut(b, "=")
		return strings.Compare(an, bn)
	})
	return out
}

// fakeTime is libfaketime's FAKETIME for d: start at Now, +1 ms per read.
func (d *Determinism) fakeTime() string {
	return "@" + d.Now.UTC().Format("2006-01-02 15:04:05") + " i0.001"
}

// FakeTimeRC is the block's /etc/faketimerc: the same clock as FAKETIME,
// for the programs in which libfaketime's getenv finds no FAKETIME (bash:
// see hook.writeFakeTimeRC).
func (d *Determinism) FakeTimeRC() []byte { return []byte(d.fakeTime() + "\n") }

// determinismHost reports what of deterministic mode this host lacks
// outside the sandbox's own mechanisms ("" when nothing): the time
// namespace and libfaketime.
func determinismHost() string {
	if _, err := os.Stat("/proc/self/ns/time"); err != nil {
		return "time namespaces (CONFIG_TIME_NS, Linux 5.6+)"
	}
	if _, err := os.Stat(fakeTimeLib()); err != nil {
		return "libfaketime (" + fakeTimeLib() + "; apt-get install libfaketime)"
	}
	return ""
}

// DefaultNow is the wall clock of a deterministic run that names none (and
// whose bag has no "now"): 2024-01-01T00:00:00Z.
var DefaultNow = time.Unix(1704067200, 0).UTC()

// ForBlock is d for block i of a pipeline: each block gets its own stream
// (block 0 the seed's own), the same clock. Nil stays nil.
func (d *Determinism) ForBlock(i int) *Determinism {
	if d == nil {
		return nil
	}
	c := *d
	if i > 0 {
		c.Seed = d.Seed + "\x00block " + strconv.Itoa(i)
	}
	return &c
}

// ErrDeterministicNetwork refuses a deterministic block that could reach a network (Config.Network, or
// an egress proxy with any destination left for its run): every random byte of a deterministic block,
// the keys and client random of its TLS handshakes included, follows from its seed (the empty seed
// unless the request names one), so its ClientHellos repeat byte for byte and anyone who knows the seed
// could decrypt the block's recorded HTTPS traffic (issue 35 item 6). Network replies are not
// reproducible anyway.
var ErrDeterministicNetwork = errors.New("deterministic mode cannot run with network access: its random bytes, TLS keys included, " +
	"follow from the seed, so anyone who knows the seed could decrypt its HTTPS traffic")

// DeterministicNetworkRefusal is a front end's 400 message for a deterministic request with network, in
// the request fields every front end shares (metadata.deterministic, metadata.network_allow). It names
// the network_allow field, as every refusal of that field does (the hub relays such refusals as 400).
var DeterministicNetworkRefusal = `field "metadata.network_allow": ` + ErrDeterministicNetwork.Error() +
	`; send metadata.deterministic "false", or metadata.network_allow "" for a run without network`

// Reaches reports whether a run of s with narrow as its Limits.NetworkAllow (nil: the operator's list)
// could reach a network: full network (Config.Network), or an egress proxy with a destination left.
func (s *Sandbox) Reaches(narrow *[]string) bool {
	return s.cfg.Network || (s.cfg.Egress != nil && (narrow == nil || len(*narrow) > 0))
}

// DeterminismMissing names what keeps deterministic mode from running in s
// ("" when it can run); Start would refuse such a block.
func (s *Sandbox) DeterminismMissing() string {
	st := s.report.Determinism
	if st.Supported {
		return ""
	}
	if st.Missing == "" {
		return "native mode on Linux"
	}
	return st.Missing
}
