package cgroup_test

import (
	"log"
	"os/exec"
	"syscall"

	"github.com/codellm/codellm/internal/sandbox/cgroup"
)

// The life of one run with one block, as the sandbox drives it.
func Example() {
	host, err := cgroup.Detect()
	if err != nil {
		log.Fatalf("refusing to run code without limits: %v", err) // fail closed
	}
	run, err := host.NewGroup("run-42", cgroup.Limits{Memory: 512 << 20, Pids: 256, CPUs: 1})
	if err != nil {
		log.Fatal(err)
	}
	defer run.Remove() // kills leftovers (daemons included) and deletes the groups

	block, err := run.NewChild("block-0") // before any process joins the run (v2 rule)
	if err != nil {
		log.Fatal(err)
	}
	cmd := exec.Command("/bin/true")
	if fd, ok := block.FD(); ok { // v2: born inside the group, no race
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	}
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	if _, ok := block.FD(); !ok { // v1: join right after start (see Add)
		if err := block.Add(cmd.Process.Pid); err != nil {
			log.Fatal(err)
		}
	}
	_ = cmd.Wait()
	_ = run.Kill() // the response must not be sent while anything of the run lives
	if err := run.WaitEmpty(cgroup.DefaultWait); err != nil {
		log.Print(err)
	}
	st, _ := run.Stats()
	log.Printf("peak %d B, oom kills %d, pids-limit hits %d, cpu %v", st.MemoryPeak, st.OOMKills, st.PidsMax, st.CPU)
}
