package debugger_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// chromiumPath finds the browser, or skips the test with a clear message unless CI requires it.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CODELLM_REQUIRE_BROWSER") == "1" || os.Getenv("CODELLM_REQUIRE_SANDBOX") == "1" {
		t.Fatal("chromium is not installed (apt-get install chromium) and CODELLM_REQUIRE_BROWSER/CODELLM_REQUIRE_SANDBOX=1")
	}
	t.Skip("chromium is not installed (apt-get install chromium): skipping the step UI browser test")
	return ""
}

// TestBrowserStepUI drives the embedded step UI in headless Chromium: it reports invalid fleet_input and
// server errors, steps a three-block body (the second step by keyboard shortcut), edits the pipe buffer
// and sees the edited value in the next block's output and in the final tool calls, then resets and runs
// to the end by shortcut. It saves a screenshot of the UI at the second step.
func TestBrowserStepUI(t *testing.T) {
	exe := chromiumPath(t)
	s := startDebugger(t, envOpts{})

	profile := t.TempDir()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1400, 1000),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
	}
	// A generous deadline detects a hang; it does not measure speed.
	ctx, cancelTimeout := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancelTimeout()
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(allocCtx)
	defer func() {
		cancelBrowser()
		cancelAlloc()
	}()

	run := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(bctx, chromedp.TextContent(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return v
	}
	// waitText polls until the element's text contains want.
	waitText := func(sel, want string) {
		t.Helper()
		expr := `(() => { const e = document.querySelector(` + jsonString(sel) + `); return !!e && e.textContent.includes(` + jsonString(want) + `); })()`
		if _, err := chromedp.Run(bctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(60*time.Second))); err != nil {
			got := ""
			if v, err := chromedp.Run(bctx, chromedp.Evaluate[string](`(document.querySelector(`+jsonString(sel)+`)||{}).textContent||""`)); err == nil {
				got = v
			}
			t.Fatalf("waiting for %s to contain %q: %v (has %q; error area %q)", sel, want, err, got, text("#error"))
		}
	}

	run("load the UI", chromedp.Navigate(s.URL+"/"), chromedp.WaitVisible(chromedp.ID("step")))

	// Invalid fleet_input is reported and nothing is sent.
	run("bad input", chromedp.SetValue(chromedp.ID("body"), threeBlocks), chromedp.SetValue(chromedp.ID("input"), `{"tag":`),
		chromedp.Click(chromedp.ID("step")))
	waitText("#error", "fleet_input is not valid JSON")
	if n := s.dbg.Sessions(); n != 0 {
		t.Fatalf("%d sessions created from invalid input", n)
	}
	// A server error is rendered with its code.
	run("bad body", chromedp.SetValue(chromedp.ID("input"), `{"tag":"T"}`),
		chromedp.SetValue(chromedp.ID("body"), block("cobol", "DISPLAY 1")), chromedp.Click(chromedp.ID("step")))
	waitText("#error", "unknown_language")

	// List the three blocks.
	run("list", chromedp.SetValue(chromedp.ID("body"), threeBlocks), chromedp.Click(chromedp.ID("list")))
	waitText("#blocks", "Block 3/3")
	if err := chromedp.Do(bctx, chromedp.WaitVisible(chromedp.ID("block-2"))); err != nil {
		t.Fatal(err)
	}

	// Step 1 by button, step 2 by keyboard shortcut (Ctrl+Enter).
	run("step 1", chromedp.Click(chromedp.ID("step")))
	waitText("#result-0 .stdout", "abc\ndef\n")
	waitText("#status", "next is block 2/3")
	run("step 2 (Ctrl+Enter)", chromedp.KeyEvent("\r", chromedp.KeyModifiers(chromedp.ModifierCtrl)))
	waitText("#result-1 .stdout", "ABC\nDEF\n")
	waitText("#buffer-title", "stdin of block 3/3")
	if v, err := chromedp.Run(bctx, chromedp.Value(chromedp.ID("buffer"))); err != nil || v != "ABC\nDEF\n" {
		t.Fatalf("buffer editor holds %q (%v)", v, err)
	}
	if got := text("#result-1 .exit"); !strings.Contains(got, "exit 0") || !strings.Contains(got, " ms") {
		t.Fatalf("exit/duration line %q", got)
	}
	saveScreenshot(t, bctx)

	// Edit the buffer like a user (typing fires input events), then step: block 3 reads the edit.
	if _, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`(() => { const e = document.getElementById("buffer"); e.focus(); e.select(); return true; })()`)); err != nil {
		t.Fatal(err)
	}
	run("edit buffer", chromedp.KeyEvent("typed in the browser\n"))
	waitText("#buffer-state", "edited")
	run("step 3", chromedp.Click(chromedp.ID("step")))
	waitText("#result-2 .stdout", `typed in the browser\n`)
	waitText("#final-body", "finish")
	waitText("#final-body", `"answer":"T:21"`)
	waitText("#final-body", `write_note {"path":"out.md","content":"typed in the browser\n"}`)
	if e := text("#error"); e != "" {
		t.Fatalf("error area shows %q", e)
	}

	// Stepping past the end shows the 409.
	run("step past the end", chromedp.KeyEvent(kb.F10))
	waitText("#error", "session_done")

	// Reset (Alt+R), then run to the end (F8) without edits: the pipeline's own answer.
	run("reset", chromedp.KeyEvent("r", chromedp.KeyModifiers(chromedp.ModifierAlt)))
	waitText("#status", "Reset")
	run("run to end (F8)", chromedp.KeyEvent(kb.F8))
	waitText("#final-body", `"answer":"T:8"`)
	waitText("#result-2 .stdout", `ABC\nDEF\n`)

	// A failing block stops Run to end and its error is shown in the block and the error-free status.
	run("failing body", chromedp.SetValue(chromedp.ID("body"), block("bash", "echo one")+block("bash", "echo boom >&2; exit 7")+block("bash", "cat")),
		chromedp.Click(chromedp.ID("run")))
	waitText("#result-1", "block 2/3: non-zero exit (code 7): boom")
	waitText("#status", "Block 2/3 failed")
	if got := text("#result-2"); got != "" {
		t.Fatalf("run to end went past the failure: %q", got)
	}
	// Non-UTF-8 buffers are shown in hex.
	run("binary body", chromedp.SetValue(chromedp.ID("body"), block("bash", `printf 'a\377'`)+block("bash", "cat")),
		chromedp.Click(chromedp.ID("step")))
	waitText("#buffer-state", "not UTF-8")
	if v, err := chromedp.Run(bctx, chromedp.Value(chromedp.ID("buffer-hex"))); err != nil || v != "61 ff" {
		t.Fatalf("hex view %q (%v)", v, err)
	}
}

// saveScreenshot captures the viewport as PNG. It goes to the test's temp dir, and to docs/debugger.png
// with CODELLM_UPDATE_SCREENSHOT=1 (the committed image the docs show).
func saveScreenshot(t *testing.T, ctx context.Context) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if len(png) < 8 || string(png[1:4]) != "PNG" {
		t.Fatalf("screenshot is not a PNG (%d bytes)", len(png))
	}
	dst := filepath.Join(t.TempDir(), "debugger.png")
	if os.Getenv("CODELLM_UPDATE_SCREENSHOT") == "1" {
		dst = filepath.Join("..", "..", "docs", "debugger.png")
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(dst, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of the second step: %s", dst)
}
