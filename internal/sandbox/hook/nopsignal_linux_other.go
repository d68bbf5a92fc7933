//go:build linux && !amd64 && !arm64

package hook

import (
	"os"
	"os/signal"
	"syscall"
)

// quietSignals, where codellm has no assembly handler (see
// nopsignal_linux.go), subscribes to the signals with a channel nobody
// reads (os/signal drops what does not fit): dearer, the same semantics.
func quietSignals(sigs []syscall.Signal) error {
	c := make(chan os.Signal, 1)
	for _, s := range sigs {
		signal.Notify(c, s)
	}
	return nil
}
