package workspace

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
)

// rgInstallHint is appended to every "rg is missing" error so the operator knows the fix.
const rgInstallHint = "ripgrep (rg) is not installed or not executable; install it (Debian/Ubuntu: apt-get install ripgrep; " +
	"macOS: brew install ripgrep; others: https://github.com/BurntSushi/ripgrep#installation) or put rg on PATH"

// enumerator streams `rg --files` candidates (§9.4/§9.5): ripgrep decides which files are candidates (hidden
// entries skipped, ignore files honoured, symlinks not followed), and this package decides what is safe to
// touch, by resolving every candidate again beneath the root.
type enumerator struct {
	cmd    *exec.Cmd
	out    io.ReadCloser
	br     *bufio.Reader
	stderr bytes.Buffer
	cancel context.CancelFunc
}

func (w *Workspace) rgPath() (string, error) {
	name := w.opts.RipgrepPath
	if name == "" {
		name = "rg"
	}
	p, err := exec.LookPath(name)
	if err != nil {
		return "", errors.New(rgInstallHint)
	}
	return p, nil
}

// rgEnv passes what ripgrep needs to find the global git excludes file, and nothing else.
func rgEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case k == "HOME", k == "XDG_CONFIG_HOME", k == "PATH", k == "LANG", strings.HasPrefix(k, "LC_"):
			env = append(env, kv)
		}
	}
	return env
}

// startEnum runs rg in the root with rel ("" = the whole root) as its only path. maxFilesize adds the 1 MiB
// cap search uses; list passes --no-messages instead.
func (w *Workspace) startEnum(ctx context.Context, rel string, search bool) (*enumerator, error) {
	rg, err := w.rgPath()
	if err != nil {
		return nil, err
	}
	args := []string{"--files", "--no-config", "--no-follow", "--sort", "path", "--path-separator", "/", "--null"}
	if search {
		args = append(args, "--max-filesize", "1M")
	} else {
		args = append(args, "--no-messages")
	}
	args = append(args, "--")
	if rel != "" {
		args = append(args, rel)
	}
	cctx, cancel := context.WithCancel(ctx)
	cmd := exec.CommandContext(cctx, rg, args...)
	cmd.Dir = w.res.workDir()
	cmd.Env = rgEnv()
	e := &enumerator{cmd: cmd, cancel: cancel}
	cmd.Stderr = &limitedBuffer{buf: &e.stderr, max: 4096}
	out, err := cmd.StdoutPipe()
	if err != nil {
		cancel()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, errors.New("cannot start ripgrep: " + errnoText(err))
	}
	e.out, e.br = out, bufio.NewReaderSize(out, 64<<10)
	return e, nil
}

// next returns the next candidate (raw bytes, without the NUL), or io.EOF.
func (e *enumerator) next() ([]byte, error) {
	b, err := e.br.ReadBytes(0)
	if err == io.EOF && len(b) > 0 {
		return b, nil // a last name without terminator
	}
	if err != nil {
		return nil, err
	}
	return b[:len(b)-1], nil
}

// stop kills rg (when the caller has enough) and reaps it; it reports whether rg failed on its own.
func (e *enumerator) stop(early bool) error {
	if early {
		e.cancel()
	}
	_, _ = io.Copy(io.Discard, e.out)
	err := e.cmd.Wait()
	e.cancel()
	if early || err == nil {
		return nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 1 {
		return nil // rg's "nothing found"
	}
	msg := strings.TrimSpace(e.stderr.String())
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	if msg == "" {
		msg = err.Error()
	}
	return errors.New("ripgrep failed: " + msg)
}

type limitedBuffer struct {
	buf *bytes.Buffer
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.max - l.buf.Len(); room > 0 {
		if len(p) < room {
			room = len(p)
		}
		l.buf.Write(p[:room])
	}
	return len(p), nil
}

// resolveScope validates the optional path of search/list: it must exist beneath the root and contain no
// symlink (ripgrep is handed this path and must not be steered through a link).
func (w *Workspace) resolveScope(p *string) (string, statInfo, error) {
	rel := ""
	if p != nil {
		var err error
		if rel, err = cleanPath(*p); err != nil {
			return "", statInfo{}, err
		}
	}
	si, err := w.res.stat(rel)
	if err != nil {
		return "", statInfo{}, pathError(err, rel, CodeInvalidPath)
	}
	if !si.mode.IsDir() && !si.mode.IsRegular() {
		return "", statInfo{}, newErr(CodeInvalidPath, "path is neither a directory nor a regular file: "+displayPath(rel))
	}
	return rel, si, nil
}
