package examples

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The README's Go client example is client/main.go's marked lines, as printed, and that program gets
// the tool call the README's comment says from a real serve.
func TestGoClientExample(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	must(t, err)
	var printed []string
	for _, b := range fencedBlocks(string(readme)) {
		if b.lang == "go" {
			printed = b.lines
		}
	}
	src, err := os.ReadFile("client/main.go")
	must(t, err)
	_, marked, _ := strings.Cut(string(src), "// README:\n")
	marked, _, _ = strings.Cut(marked, "\t// end README\n")
	lines := strings.Split(strings.TrimSuffix(marked, "\n"), "\n")
	for i := range lines {
		lines[i] = strings.TrimPrefix(lines[i], "\t")
	}
	if len(printed) == 0 || strings.Join(printed, "\n") != strings.Join(lines, "\n") {
		t.Fatalf("the README's go block:\n%s\nis not client/main.go's README lines:\n%s", strings.Join(printed, "\n"), strings.Join(lines, "\n"))
	}

	requireNative(t)
	s := newSession(t, bin(t), "README.md")
	s.start(command{file: "README.md", text: "bin/codellm serve"}, "bin/codellm serve", "codellm serving")
	// The program as printed, its 8080 moved to the session's port through a build overlay.
	abs, err := filepath.Abs("client/main.go")
	must(t, err)
	moved := filepath.Join(s.dir, "main.go")
	must(t, os.WriteFile(moved, []byte(s.ports(string(src))), 0o644))
	overlay, _ := json.Marshal(map[string]map[string]string{"Replace": {abs: moved}})
	must(t, os.WriteFile(filepath.Join(s.dir, "overlay.json"), overlay, 0o644))
	client := filepath.Join(s.dir, "client")
	if out, err := exec.Command("go", "build", "-overlay", filepath.Join(s.dir, "overlay.json"), "-o", client, "./client").CombinedOutput(); err != nil {
		t.Fatalf("go build ./client: %v\n%s", err, out)
	}
	cmd := exec.Command(client)
	cmd.Env = s.env
	out, err := cmd.CombinedOutput()
	if want := `finish {"answer":"hi"}`; err != nil || strings.TrimSpace(string(out)) != want {
		t.Fatalf("client: %v\n%s\nwant %s (the README's comment)", err, out, want)
	}
}
