package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/codellm/codellm/internal/seal"
)

// sealTestKey is the key trip2g's seal CLI test uses.
const sealTestKey = "12345678901234567890123456789012"

// runBin runs the real binary with stdin and extra environment and returns stdout, stderr and the exit code.
func runBin(t *testing.T, stdin string, env []string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

func TestSealCommandRoundTripsThroughTheServiceFormat(t *testing.T) {
	out, stderr, code := runBin(t, "krisp-token\n", []string{"SEAL_KEY=" + sealTestKey}, "seal")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	blob := strings.TrimSpace(out)
	if !strings.HasPrefix(blob, "sealed:v1:") || strings.Count(out, "\n") != 1 {
		t.Fatalf("stdout %q: want one sealed:v1: line", out)
	}
	got, err := seal.Open(sealTestKey, blob)
	if err != nil || got != "krisp-token" {
		t.Fatalf("Open = %q, %v (the shell's trailing newline is not part of the secret)", got, err)
	}
	if strings.Contains(stderr, "krisp-token") {
		t.Fatalf("stderr echoes the plaintext: %s", stderr)
	}

	out, _, code = runBin(t, "v", []string{"SEAL_KEY_V2=" + sealTestKey}, "seal", "--env-key", "SEAL_KEY_V2")
	if got, err := seal.Open(sealTestKey, strings.TrimSpace(out)); code != 0 || err != nil || got != "v" {
		t.Fatalf("--env-key SEAL_KEY_V2: exit %d, %q, %v", code, got, err)
	}
}

func TestSealCommandFailures(t *testing.T) {
	for _, tc := range []struct {
		name  string
		env   []string
		args  []string
		stdin string
		code  int
		want  string
	}{
		{"unset key", []string{"SEAL_KEY="}, nil, "v", 1, "SEAL_KEY is not set"},
		{"short key", []string{"SEAL_KEY=too-short"}, nil, "v", 1, "exactly 32 bytes"},
		{"empty input", []string{"SEAL_KEY=" + sealTestKey}, nil, "\n", 1, "nothing to seal"},
		{"secret as argument", []string{"SEAL_KEY=" + sealTestKey}, []string{"s3cret"}, "", 2, "never from arguments"},
		{"foreign key variable", []string{"CODELLM_API_KEY=" + sealTestKey}, []string{"--env-key", "CODELLM_API_KEY"}, "v", 2,
			"SEAL_KEY_<SUFFIX>"},
	} {
		out, stderr, code := runBin(t, tc.stdin, tc.env, append([]string{"seal"}, tc.args...)...)
		if code != tc.code || !strings.Contains(stderr, tc.want) || out != "" {
			t.Errorf("%s: exit %d stdout %q stderr %q; want exit %d and %q", tc.name, code, out, stderr, tc.code, tc.want)
		}
	}
}

// Differential: serve starts with an ordinary exposure and refuses one that hands the seal key to blocks.
func TestServeRefusesToExposeTheSealKey(t *testing.T) {
	for _, args := range [][]string{{"--expose-env", "SEAL_KEY"}, {"--expose-env-prefix", "SEAL"}, {"--expose-env", "SEAL_KEY_V2"}} {
		_, stderr, code := runBin(t, "", []string{"SEAL_KEY=" + sealTestKey},
			append([]string{"serve", "--sandbox", "off", "--listen", "127.0.0.1:1"}, args...)...)
		if code != 2 || !strings.Contains(stderr, "seal key") {
			t.Errorf("%v: exit %d: %s", args, code, stderr)
		}
	}
	_, stderr, code := runBin(t, "", nil, "run", "--sandbox", "off", "--expose-env-prefix", "KRISP_", "-")
	if strings.Contains(stderr, "seal key") {
		t.Errorf("an unrelated exposure is refused: exit %d: %s", code, stderr)
	}
}
