package sandbox

import (
	"strings"
	"testing"
)

// TestInterpretersWork: the minimal root has what the supported
// interpreters need (shared libraries, ld.so.cache, /etc/ssl,
// /etc/alternatives, passwd entries, /dev nodes, /proc, writable tmp).
func TestInterpretersWork(t *testing.T) {
	s := nativeSandbox(t)
	cases := []struct {
		name string
		argv []string
		want string
	}{
		{"python", py(`
import ssl, hashlib, json, os, pwd, socket, subprocess, tempfile, multiprocessing
ctx = ssl.create_default_context()
assert ctx.cert_store_stats()["x509_ca"] > 0, "no CA certificates"
with tempfile.NamedTemporaryFile() as f: f.write(b"x")
print(pwd.getpwuid(os.getuid()).pw_name, subprocess.run(["echo", "sub"], capture_output=True, text=True).stdout.strip(), json.dumps({"a": 1}), len(os.urandom(8)))
`), "sandbox sub {\"a\": 1} 8"},
		{"python-multiprocessing", py(`
import multiprocessing as mp
if __name__ == "__main__":
    with mp.Pool(2) as p: print(sum(p.map(abs, [-1, -2, 3])))
`), "6"},
		{"node", []string{"/usr/bin/node", "-e", `const c=require("crypto"),fs=require("fs"),os=require("os");fs.writeFileSync(os.tmpdir()+"/x","y");console.log(c.createHash("sha256").update("a").digest("hex").slice(0,8), fs.readFileSync(os.tmpdir()+"/x","utf8"))`}, "ca978112 y"},
		{"perl", []string{"/usr/bin/perl", "-MPOSIX", "-e", `print uc("perl"), " ", (getpwuid($<))[0], "\n"`}, "PERL sandbox"},
		{"bash", []string{"/bin/bash", "-c", `set -euo pipefail; printf 'b\na\n' | sort | tr '\n' ' '; echo; cat /dev/null; head -c 4 /dev/zero | wc -c`}, "a b \n4"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := mustRun(t, s, c.argv...)
			if o.ExitCode != 0 || strings.TrimSpace(o.Stdout) != c.want {
				t.Fatalf("got exit %d stdout %q stderr %q; want %q", o.ExitCode, o.Stdout, o.Stderr, c.want)
			}
		})
	}
}

func TestReportNative(t *testing.T) {
	s := nativeSandbox(t)
	rep := s.Report()
	if rep.Mode != ModeNative || !rep.Ready || len(rep.Missing) != 0 {
		t.Fatalf("report %+v", rep)
	}
	for _, m := range rep.Mechanisms {
		if !m.Available || !m.Used {
			t.Errorf("mechanism %s: available=%v used=%v (%s)", m.Name, m.Available, m.Used, m.Detail)
		}
	}
	if !strings.Contains(rep.String(), "landlock") || !strings.Contains(string(rep.JSON()), `"ready": true`) {
		t.Fatalf("table/JSON:\n%s\n%s", rep.String(), rep.JSON())
	}
}

func TestReportOff(t *testing.T) {
	rep := Probe(Config{Mode: ModeOff})
	if !rep.Ready || len(rep.Warnings) == 0 || rep.Mode != ModeOff {
		t.Fatalf("off report: %+v", rep)
	}
	for _, m := range rep.Mechanisms {
		if m.Used {
			t.Errorf("off mode uses %s", m.Name)
		}
	}
	bad := Probe(Config{Mode: "bogus"})
	if bad.Ready || len(bad.Warnings) == 0 {
		t.Fatalf("invalid config report: %+v", bad)
	}
}
