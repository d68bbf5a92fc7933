//go:build linux

package hook

import (
	"strings"
	"syscall"
	"testing"
)

// A spec may name a directory as overlaid in place (Spec.Overlaid) only
// when it is an overlay mount in the helper's namespace: a plain directory,
// and on a host whose root filesystem is an overlay (a container) a
// directory of that root, are refused as the overlay mechanism's failure,
// since binding them would leave host sockets below them connectable.
func TestTakeOverlaidRefusesWhatIsNotAnOverlayMount(t *testing.T) {
	dirs := []string{t.TempDir(), "/"}
	var sfs syscall.Statfs_t
	if syscall.Statfs("/usr", &sfs) == nil && uint32(sfs.Type) == overlayfsMagic {
		dirs = append(dirs, "/usr") // this host's root is an overlay: the type alone would pass
	}
	for _, d := range dirs {
		err := (&sysTree{overlay: true}).takeOverlaid([]string{d})
		if _, ok := err.(errOverlay); !ok || !strings.Contains(err.Error(), "not an overlay mount") {
			t.Errorf("%s: want the overlay mechanism's refusal, got %v", d, err)
		}
	}
}

func TestParentDir(t *testing.T) {
	for in, want := range map[string]string{"/usr": "/", "/a/b": "/a", "/": "/", "/a/b/c": "/a/b"} {
		if got := parentDir(in); got != want {
			t.Errorf("parentDir(%q) = %q, want %q", in, got, want)
		}
	}
}
