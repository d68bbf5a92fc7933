package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/testhelp"
)

// survivorBlock is a bash block that leaves three programs with marker in their argv (two in the
// background, one in the foreground) and runs until they are killed.
func survivorBlock(marker string) string {
	return "```bash\nsleep " + marker + " &\nsleep " + marker + " &\nsleep " + marker + "\n```"
}

// newMarker is a sleep argument no other test's processes have: 600 s and a fraction unique to this run.
func newMarker(t *testing.T) string {
	m := fmt.Sprintf("600.%d%06d", os.Getpid(), time.Now().UnixNano()%1e6)
	t.Cleanup(func() { testhelp.KillCmdline(t, "sleep\x00"+m) })
	return m
}

// helpers are the two helpers a crash test runs on: the raw helper (the default) and the Go helper.
var helpers = []struct{ name, flag string }{{"raw helper", ""}, {"go helper", "--go-helper"}}

// helperArgs are serve's arguments for a helper's flag.
func helperArgs(flag string) []string {
	if flag == "" {
		return nil
	}
	return []string{flag}
}

// serveMidBlock starts serve with args and a chat whose block leaves three sleeps running, and returns
// once they run, with the argv prefix that finds them.
func serveMidBlock(t *testing.T, args []string) (*serveProc, string) {
	t.Helper()
	s := startServeProc(t, args...)
	marker := newMarker(t)
	body, _ := json.Marshal(map[string]any{"model": "codellm",
		"messages": []map[string]string{{"role": "user", "content": survivorBlock(marker)}}})
	go func() {
		resp, err := http.Post(s.base+"/v1/chat/completions", "application/json", bytes.NewReader(body))
		if err == nil {
			resp.Body.Close()
		}
	}()
	argv := "sleep\x00" + marker
	testhelp.WaitCmdline(t, argv, 3, 60*time.Second)
	return s, argv
}

// A SIGKILLed `serve` takes its blocks along, whichever helper started them (issue 35 item 1: with the
// raw helper three programs per run lived on, its parent-death signal cleared by its setresuid). Each
// helper: a block starts three sleeps, the server is SIGKILLed mid-block, and none may remain.
func TestSIGKILLedServeLeavesNoBlock(t *testing.T) {
	for _, c := range helpers {
		t.Run(c.name, func(t *testing.T) {
			args := helperArgs(c.flag)
			s, argv := serveMidBlock(t, args)
			if err := s.cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			s.stop() // reaps it
			if left := testhelp.WaitCmdlineGone(t, argv, 15*time.Second); len(left) > 0 {
				t.Fatalf("%d of the block's 3 programs outlived the SIGKILLed server: PIDs %v", len(left), left)
			}
		})
	}
}

// freezeGroups freezes every cgroup a codellm process made (v1 freezer.state, v2 cgroup.freeze), as its
// own run-group kill does between its freeze and its thaw; it reports how many it froze.
func freezeGroups(t *testing.T, pid int) int {
	t.Helper()
	n := 0
	for _, d := range testhelp.CgroupsOf(t, pid) {
		for _, f := range []struct{ file, value string }{{"freezer.state", "FROZEN"}, {"cgroup.freeze", "1"}} {
			if err := os.WriteFile(d+"/"+f.file, []byte(f.value), 0); err == nil {
				n++
			}
		}
	}
	return n
}

// A `serve` SIGKILLed while one of its run groups is frozen (on cgroup v1 its kill of a run freezes the
// group, signals it and thaws it) left the blocks frozen for good: a frozen v1 task does not act on its
// SIGKILL, and the next start's sweep skipped groups that still held processes (issue 35 item 7). Now the
// next start kills what a dead server's groups hold and removes them. Both helpers; on the old code the
// three sleeps stay, frozen.
func TestServeKilledMidFreezeLeavesNothingFrozen(t *testing.T) {
	for _, c := range helpers {
		t.Run(c.name, func(t *testing.T) {
			args := helperArgs(c.flag)
			s, argv := serveMidBlock(t, args)
			pid := s.cmd.Process.Pid
			if freezeGroups(t, pid) == 0 {
				t.Skip("no cgroup freezer here: nothing can be left frozen")
			}
			t.Cleanup(func() { thawGroups(t, pid) })
			_ = s.cmd.Process.Kill()
			s.stop()
			startServeProc(t, args...) // its sandbox sweeps the dead server's groups
			if left := testhelp.WaitCmdlineGone(t, argv, 15*time.Second); len(left) > 0 {
				t.Fatalf("%d of the block's 3 programs stayed (frozen) after the next start: PIDs %v", len(left), left)
			}
			if left := testhelp.CgroupsOf(t, pid); len(left) > 0 {
				t.Errorf("the dead server's run groups stayed: %q", left)
			}
		})
	}
}

// thawGroups undoes freezeGroups where a failed test left groups behind.
func thawGroups(t *testing.T, pid int) {
	for _, d := range testhelp.CgroupsOf(t, pid) {
		_ = os.WriteFile(d+"/freezer.state", []byte("THAWED"), 0)
		_ = os.WriteFile(d+"/cgroup.freeze", []byte("0"), 0)
	}
}
