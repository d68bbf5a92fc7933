//go:build linux

package mount

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Setup builds the root described by o and pivots into it; on return the
// calling process's root is the new tmpfs (mounted read-only) and its
// working directory is "/". It must run in a private mount namespace with
// CAP_SYS_ADMIN there, and in the PID namespace whose /proc it should show.
func Setup(o Options) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	if o.Persist && !o.DirIsTree {
		// Take a detached copy of the workdir mount now, by path, before
		// the staging root covers it (it may live under /tmp). The server
		// is unprivileged in this case, so our uid (its uid) can traverse
		// the workdir's parents.
		fd, err := unix.OpenTree(unix.AT_FDCWD, o.Dir, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err != nil {
			return fmt.Errorf("open_tree workdir: %w", err)
		}
		defer unix.Close(fd)
		o.DirFD, o.DirIsTree = fd, true
	}
	r := o.Staging
	if err := unix.Mount("tmpfs", r, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=1m,nr_inodes=4096,mode=0755"); err != nil {
		return fmt.Errorf("mount root tmpfs on %s: %w", r, err)
	}
	for _, d := range SystemDirs {
		if err := mirror(d, r+d, true); err != nil {
			return err
		}
	}
	if err := os.Mkdir(r+"/etc", 0o755); err != nil {
		return err
	}
	etc := EtcEntries
	if o.Network {
		etc = append(append([]string{}, etc...), "resolv.conf", "gai.conf")
	}
	for _, e := range etc {
		if err := mirror("/etc/"+e, r+"/etc/"+e, false); err != nil {
			return err
		}
	}
	for name, data := range map[string][]byte{"passwd": o.Passwd, "group": o.Group, "hosts": o.Hosts, "hostname": []byte("codellm\n")} {
		if err := os.WriteFile(r+"/etc/"+name, data, 0o644); err != nil {
			return fmt.Errorf("write /etc/%s: %w", name, err)
		}
	}
	if err := setupDev(r, o.TmpSize); err != nil {
		return err
	}
	if err := os.Mkdir(r+"/proc", 0o555); err != nil {
		return err
	}
	if err := unix.Mount("proc", r+"/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC|unix.MS_RDONLY, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	if err := os.Mkdir(r+"/tmp", 0o1777); err != nil {
		return err
	}
	if err := mountTmpfs(r+"/tmp", o.TmpSize, "1777"); err != nil {
		return fmt.Errorf("mount /tmp: %w", err)
	}
	if err := setupWorkdir(r, o); err != nil {
		return err
	}
	// Make the root itself read-only: nothing outside the workdir, /tmp and
	// /dev/shm is writable.
	if err := unix.Mount("", r, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("remount root read-only: %w", err)
	}
	if err := unix.Chdir(r); err != nil {
		return err
	}
	// pivot_root(".", ".") stacks the old root under the new one at "/";
	// detaching it leaves only the new root, without needing a directory
	// for the old root inside the (read-only) new one.
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach old root: %w", err)
	}
	return unix.Chdir("/")
}

func mountTmpfs(target string, size int64, mode string) error {
	return unix.Mount("tmpfs", target, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV,
		"size="+strconv.FormatInt(size, 10)+",mode="+mode)
}

// mirror recreates host path src at dst: symlinks as symlinks, directories
// and files as read-only bind mounts. A missing src is skipped.
func mirror(src, dst string, dirsOnly bool) error {
	var st unix.Stat_t
	if err := unix.Lstat(src, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("stat %s: %w", src, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst)
	case unix.S_IFDIR:
		if err := os.Mkdir(dst, 0o755); err != nil {
			return err
		}
	case unix.S_IFREG:
		if dirsOnly {
			return nil
		}
		f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		f.Close()
	default:
		return nil
	}
	return bindRO(src, dst)
}

// bindRO bind-mounts src on dst and remounts it read-only and nosuid,
// keeping the flags the kernel locks on mounts inherited from a more
// privileged namespace (dropping a locked flag would fail with EPERM).
func bindRO(src, dst string) error {
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", src, err)
	}
	return remount(dst, unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV)
}

func remount(dst string, extra uintptr) error {
	var sfs unix.Statfs_t
	if err := unix.Statfs(dst, &sfs); err != nil {
		return fmt.Errorf("statfs %s: %w", dst, err)
	}
	flags := uintptr(unix.MS_REMOUNT|unix.MS_BIND) | extra
	for _, m := range [][2]uintptr{
		{unix.ST_RDONLY, unix.MS_RDONLY}, {unix.ST_NOSUID, unix.MS_NOSUID}, {unix.ST_NODEV, unix.MS_NODEV},
		{unix.ST_NOEXEC, unix.MS_NOEXEC}, {unix.ST_NOATIME, unix.MS_NOATIME}, {unix.ST_NODIRATIME, unix.MS_NODIRATIME},
		{unix.ST_RELATIME, unix.MS_RELATIME},
	} {
		if uintptr(sfs.Flags)&m[0] != 0 {
			flags |= m[1]
		}
	}
	if err := unix.Mount("", dst, "", flags, ""); err != nil {
		return fmt.Errorf("remount %s: %w", dst, err)
	}
	return nil
}

func setupDev(r string, tmpSize int64) error {
	dev := r + "/dev"
	if err := os.Mkdir(dev, 0o755); err != nil {
		return err
	}
	for _, n := range DevNodes {
		f, err := os.OpenFile(dev+"/"+n, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o666)
		if err != nil {
			return err
		}
		f.Close()
		if err := unix.Mount("/dev/"+n, dev+"/"+n, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind /dev/%s: %w", n, err)
		}
		if err := remount(dev+"/"+n, unix.MS_NOSUID|unix.MS_NOEXEC); err != nil {
			return err
		}
	}
	for name, target := range map[string]string{
		"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2",
	} {
		if err := os.Symlink(target, dev+"/"+name); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dev+"/shm", 0o1777); err != nil {
		return err
	}
	if err := mountTmpfs(dev+"/shm", tmpSize, "1777"); err != nil {
		return fmt.Errorf("mount /dev/shm: %w", err)
	}
	return nil
}

// setupWorkdir makes o.Dir appear at the same path inside the new root.
// Parent directories are created 0755 in whichever filesystem holds them
// (the private /tmp when Dir is under /tmp).
func setupWorkdir(r string, o Options) error {
	dst := r + o.Dir
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return fmt.Errorf("create workdir mount point: %w", err)
	}
	if o.Persist {
		if err := unix.MoveMount(o.DirFD, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("attach workdir: %w", err)
		}
		return remount(dst, unix.MS_NOSUID|unix.MS_NODEV)
	}
	if err := mountTmpfs(dst, o.TmpSize, "0700"); err != nil {
		return fmt.Errorf("mount workdir tmpfs: %w", err)
	}
	if err := copyTree(o.DirFD, dst, 0); err != nil {
		if errors.Is(err, unix.ENOSPC) {
			return fmt.Errorf("%w (%v)", ErrWorkdirTooLarge, err)
		}
		return fmt.Errorf("copy workdir: %w", err)
	}
	return nil
}

// copyTree copies the directory open at fd into dst: regular files,
// directories and symlinks (as links; they resolve inside the sandbox, so
// a link to a host file shows nothing of the host). Other types are skipped.
func copyTree(fd int, dst string, depth int) error {
	if depth > 64 {
		return fmt.Errorf("workdir nests deeper than 64 levels")
	}
	// Read from a duplicate so that closing d doesn't close the caller's fd.
	dup, err := unix.Dup(fd)
	if err != nil {
		return err
	}
	d := os.NewFile(uintptr(dup), "workdir")
	defer d.Close()
	if _, err := d.Seek(0, io.SeekStart); err != nil {
		return err
	}
	names, err := d.Readdirnames(-1)
	if err != nil {
		return err
	}
	for _, n := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		target := filepath.Join(dst, n)
		perm := os.FileMode(st.Mode & 0o777)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			if err := copyFile(fd, n, target, perm); err != nil {
				return err
			}
		case unix.S_IFDIR:
			if err := os.Mkdir(target, perm|0o700); err != nil {
				return err
			}
			sub, err := unix.Openat(fd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			err = copyTree(sub, target, depth+1)
			unix.Close(sub)
			if err != nil {
				return err
			}
		case unix.S_IFLNK:
			buf := make([]byte, 4096)
			k, err := unix.Readlinkat(fd, n, buf)
			if err != nil {
				return err
			}
			if err := os.Symlink(string(buf[:k]), target); err != nil {
				return err
			}
		}
	}
	return nil
}

func copyFile(dirfd int, name, dst string, perm os.FileMode) error {
	sfd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", name, err)
	}
	src := os.NewFile(uintptr(sfd), name)
	defer src.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, perm|0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, src)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("copy %s: %w", strings.TrimPrefix(dst, "/"), err)
	}
	return nil
}
