package runner

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// mountQuota makes dir a tmpfs of size bytes, so a run's writes to its workspace are bounded in bytes
// and inodes (threat model: filling the disk is bounded per run). It needs CAP_SYS_ADMIN in the host's
// mount namespace, i.e. a root codellm.
func mountQuota(dir string, size int64) error {
	// One inode per 4 KiB (at least 1024): a session cannot hold hundreds of thousands of files, which
	// also bounds the walk every execute makes over its workspace.
	inodes := max(size/4096, 1024)
	opts := "size=" + strconv.FormatInt(size, 10) + ",nr_inodes=" + strconv.FormatInt(inodes, 10) + ",mode=0700"
	if err := unix.Mount("codellm-workspace", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount a %d-byte tmpfs on %s: %w", size, dir, err)
	}
	return nil
}

// unmountQuota detaches the workspace tmpfs (its content goes with it).
func unmountQuota(dir string) error {
	err := unix.Unmount(dir, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, os.ErrNotExist) { // EINVAL: not mounted
		return fmt.Errorf("unmount workspace %s: %w", dir, err)
	}
	return nil
}
