package workspace

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
)

func benchEnv(b *testing.B, opts Options) *testEnv { return newEnvTB(b, opts) }

func BenchmarkReadFileSmall(b *testing.B) {
	e := benchEnv(b, Options{})
	e.write("a.txt", strings.Repeat("hello world\n", 100))
	req := json.RawMessage(`{"path":"a.txt"}`)
	b.ResetTimer()
	for b.Loop() {
		if _, err := e.ws.Do(context.Background(), OpReadFile, req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadFileLastWindow reads the last lines of a 16 MiB file: the cost of streaming past the rest.
func BenchmarkReadFileLastWindow(b *testing.B) {
	e := benchEnv(b, Options{})
	e.write("big.txt", strings.Repeat(strings.Repeat("z", 99)+"\n", 16<<20/100))
	req := json.RawMessage(fmt.Sprintf(`{"path":"big.txt","startLine":%d}`, 16<<20/100-10))
	b.SetBytes(16 << 20)
	b.ResetTimer()
	for b.Loop() {
		if _, err := e.ws.Do(context.Background(), OpReadFile, req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkListFiles1200(b *testing.B) {
	e := benchEnv(b, Options{})
	for i := 0; i < 1200; i++ {
		e.write(fmt.Sprintf("d%d/f%04d.txt", i%10, i), "x")
	}
	req := json.RawMessage(`{"maxResults":500}`)
	b.ResetTimer()
	for b.Loop() {
		if _, err := e.ws.Do(context.Background(), OpListFiles, req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSearchText200Files(b *testing.B) {
	e := benchEnv(b, Options{})
	for i := 0; i < 200; i++ {
		e.write(fmt.Sprintf("d%d/f%03d.go", i%10, i), strings.Repeat("func main() { println(\"hi\") }\n", 200))
	}
	req := json.RawMessage(`{"query":"needle-not-there"}`)
	b.ResetTimer()
	for b.Loop() {
		if _, err := e.ws.Do(context.Background(), OpSearchText, req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkWriteFile4K(b *testing.B) {
	e := benchEnv(b, Options{AllowWrites: true})
	req := json.RawMessage(js(map[string]any{"path": "w.txt", "content": strings.Repeat("x", 4096)}))
	b.ResetTimer()
	for b.Loop() {
		if _, err := e.ws.Do(context.Background(), OpWriteFile, req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEditFile64K(b *testing.B) {
	e := benchEnv(b, Options{AllowWrites: true})
	e.write("e.txt", strings.Repeat("line of text\n", 5000)+"MARK-A\n")
	reqs := []json.RawMessage{
		json.RawMessage(`{"path":"e.txt","oldText":"MARK-A","newText":"MARK-B"}`),
		json.RawMessage(`{"path":"e.txt","oldText":"MARK-B","newText":"MARK-A"}`),
	}
	b.ResetTimer()
	i := 0
	for b.Loop() {
		if _, err := e.ws.Do(context.Background(), OpEditFile, reqs[i%2]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkExecuteCommandOff(b *testing.B) {
	e := newEnvTB(b, Options{AllowCommands: true, Sandbox: offSandbox(b), AllowUnconfinedCommands: true})
	req := json.RawMessage(`{"command":"true"}`)
	b.ResetTimer()
	for b.Loop() {
		if _, err := e.ws.Do(context.Background(), OpExecuteCommand, req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkExecuteCommandNative is the cost of one `true` in the native sandbox (namespaces, mounts, Landlock,
// seccomp, cgroup), which is what every workspace command pays.
func BenchmarkExecuteCommandNative(b *testing.B) {
	if _, err := os.Stat("/proc/self/ns/user"); err != nil {
		b.Skip("no user namespaces")
	}
	sb := nativeSandboxTB(b)
	e := newEnvTB(b, Options{AllowCommands: true, Sandbox: sb})
	os.Chown(e.root, sandboxUID, sandboxUID)
	req := json.RawMessage(`{"command":"true"}`)
	b.ResetTimer()
	for b.Loop() {
		if _, err := e.ws.Do(context.Background(), OpExecuteCommand, req); err != nil {
			b.Fatal(err)
		}
	}
}
