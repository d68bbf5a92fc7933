package sandbox

import "testing"

func TestSmoke(t *testing.T) {
	s := nativeSandbox(t)
	t.Log(s.Report().String())
	o := mustRun(t, s, sh("id; hostname; ls /; cat /proc/self/status | grep -E 'NoNewPrivs|Seccomp|Cap'; ls /proc; pwd; ls -la")...)
	t.Logf("%+v\nstdout:\n%s\nstderr:\n%s", o.Result, o.Stdout, o.Stderr)
}

func TestReportDump(t *testing.T) {
	s := sandboxFor(t, ModeNative, false)
	t.Log(s.Report().String())
}
