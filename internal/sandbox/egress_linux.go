//go:build linux

package sandbox

import (
	_ "embed"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/codellm/codellm/internal/sandbox/hook"
	"golang.org/x/sys/unix"
)

// EgressProxyURL is what a block's proxy variables point at.
var EgressProxyURL = fmt.Sprintf("http://127.0.0.1:%d", hook.EgressPort)

// proxyEnv replaces any proxy variable of env with the block's proxy, in
// both spellings. ALL_PROXY is socks5h (the proxy resolves names, so
// clients that honour it never need DNS); NO_PROXY is emptied, because
// nothing can listen inside the namespace (Landlock denies bind) and a
// "localhost" exception would only make allowed loopback destinations of
// the operator's unreachable; NODE_USE_ENV_PROXY makes Node's fetch
// (22.21+/24+) honour the variables, and NODE_OPTIONS gets a preload that
// makes older Node's fetch tunnel through the proxy (egress_fetch.mjs).
func proxyEnv(env []string) []string {
	set := map[string]string{
		"HTTP_PROXY":         EgressProxyURL,
		"HTTPS_PROXY":        EgressProxyURL,
		"ALL_PROXY":          fmt.Sprintf("socks5h://127.0.0.1:%d", hook.EgressPort),
		"NO_PROXY":           "",
		"NODE_USE_ENV_PROXY": "1",
	}
	out := make([]string, 0, len(env)+9)
	for _, e := range env {
		name, _, _ := strings.Cut(e, "=")
		if _, ok := set[strings.ToUpper(name)]; !ok {
			out = append(out, e)
		}
	}
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"} {
		out = append(out, k+"="+set[k], strings.ToLower(k)+"="+set[k])
	}
	return withNodeFetchPreload(append(out, "NODE_USE_ENV_PROXY=1"))
}

// egressFetchJS makes fetch of Node < 22.21 (which ignores the proxy variables) tunnel through the proxy.
//
//go:embed egress_fetch.mjs
var egressFetchJS []byte

// nodeFetchImport is the --import option that loads egressFetchJS: a data: URL, so no file has to be
// visible inside the block, and nothing in the block's workdir changes.
var nodeFetchImport = "--import=data:text/javascript;base64," + base64.StdEncoding.EncodeToString(egressFetchJS)

// withNodeFetchPreload appends nodeFetchImport to NODE_OPTIONS (kept when the block already has one).
func withNodeFetchPreload(env []string) []string {
	for i, e := range env {
		if v, ok := strings.CutPrefix(e, "NODE_OPTIONS="); ok {
			env[i] = "NODE_OPTIONS=" + strings.TrimSpace(v+" "+nodeFetchImport)
			return env
		}
	}
	return append(env, "NODE_OPTIONS="+nodeFetchImport)
}

// egressPair is the socket pair the helper sends its listener on.
func egressPair() (parent, child *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox: egress socket pair: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "egress-parent"), os.NewFile(uintptr(fds[1]), "egress-child"), nil
}

// receiveListener takes the listening socket the helper sent before it
// exec'd the program (so it is already queued).
func receiveListener(f *os.File) (net.Listener, error) {
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, _, _, err := unix.Recvmsg(int(f.Fd()), buf, oob, unix.MSG_DONTWAIT|unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("egress: no listener from the helper: %w", err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	var fds []int
	for _, m := range msgs {
		if got, e := unix.ParseUnixRights(&m); e == nil {
			fds = append(fds, got...)
		}
	}
	if err != nil || n != 1 || buf[0] != 'L' || len(fds) != 1 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, errors.New("egress: malformed listener message from the helper")
	}
	lf := os.NewFile(uintptr(fds[0]), "egress-listener")
	defer lf.Close()
	ln, err := net.FileListener(lf)
	if err != nil {
		return nil, fmt.Errorf("egress: listener from the helper: %w", err)
	}
	return ln, nil
}
