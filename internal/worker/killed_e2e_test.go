package worker

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/codellm/codellm/internal/testhelp"
)

// A SIGKILLed `worker run` takes its running block along, whichever helper started it (issue 35 item 1:
// the raw helper's blocks lived on, their parent-death signal cleared by its setresuid). The block leaves
// three sleeps; the worker is killed once they run, and none may remain.
func TestE2EKilledWorkerLeavesNoBlock(t *testing.T) {
	for _, c := range []struct{ name, flag string }{{"raw helper", ""}, {"go helper", "--go-helper"}} {
		t.Run(c.name, func(t *testing.T) {
			h := startHubProc(t, "127.0.0.1:0", filepath.Join(t.TempDir(), "bridge.db"))
			w := pairProc(t, h, "killed")
			var extra []string
			if c.flag != "" {
				extra = append(extra, c.flag)
			}
			p := w.run(t, extra...)
			h.waitReady(t, "killed")
			marker := fmt.Sprintf("600.%d%06d", os.Getpid(), time.Now().UnixNano()%1e6)
			argv := "sleep\x00" + marker
			t.Cleanup(func() { testhelp.KillCmdline(t, argv) })
			code := "sleep " + marker + " &\nsleep " + marker + " &\nsleep " + marker
			body, _ := json.Marshal(map[string]string{"lang": "bash", "code": code})
			go h.post(t, t.Context(), "/v1/exec", string(body), map[string]string{"X-Codellm-Timeout-Ms": "60000"})
			testhelp.WaitCmdline(t, argv, 3, 60*time.Second)
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			p.exitCode(t, 10*time.Second)
			if left := testhelp.WaitCmdlineGone(t, argv, 15*time.Second); len(left) > 0 {
				t.Fatalf("%d of the block's 3 programs outlived the SIGKILLed worker: PIDs %v", len(left), left)
			}
		})
	}
}
