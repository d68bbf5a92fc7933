//go:build linux && (amd64 || arm64)

package rawhelper

import (
	"encoding/binary"
	"strconv"
	"syscall"

	"github.com/codellm/codellm/internal/sandbox/hook"
	"github.com/codellm/codellm/internal/sandbox/rawchild"
	"golang.org/x/sys/unix"
)

// NetFD is the raw helper's descriptor (Attr.Extra after the workdir) of
// its end of the socket pair it sends the egress listener on.
const NetFD = DirFD + 1

// egress appends package hook's setupEgress as steps, run in the block's
// fresh network namespace while the helper still holds CAP_NET_ADMIN
// there: bring up lo (a new namespace's loopback is down), listen on
// 127.0.0.1:hook.EgressPort and send that socket on NetFD. A socket stays
// in the namespace it was made in, so the server accepts the block's
// connections there while the namespace keeps no route anywhere else.
func egress(p *rawchild.Prog) {
	p.Tag(hook.MNetNS)
	s := p.CallSave("egress: socket for ioctl", syscall.SYS_SOCKET, rawchild.Val(syscall.AF_INET),
		rawchild.Val(syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC), rawchild.Val(0))
	ifr := make([]byte, 40) // struct ifreq: char ifr_name[16], then short ifr_flags
	copy(ifr, "lo")
	binary.NativeEndian.PutUint16(ifr[16:], syscall.IFF_UP|syscall.IFF_RUNNING)
	p.Call("egress: bring up lo", syscall.SYS_IOCTL, s.Arg(), rawchild.Val(syscall.SIOCSIFFLAGS), rawchild.Val(p.Buf(ifr)))
	p.Call("egress: close the ioctl socket", syscall.SYS_CLOSE, s.Arg())
	l := p.CallSave("egress: listening socket", syscall.SYS_SOCKET, rawchild.Val(syscall.AF_INET),
		rawchild.Val(syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC), rawchild.Val(0))
	sa := make([]byte, syscall.SizeofSockaddrInet4) // struct sockaddr_in: family, port (big-endian), address
	binary.NativeEndian.PutUint16(sa[0:], syscall.AF_INET)
	binary.BigEndian.PutUint16(sa[2:], hook.EgressPort)
	copy(sa[4:], []byte{127, 0, 0, 1})
	p.Call("egress: bind 127.0.0.1:"+strconv.Itoa(hook.EgressPort), syscall.SYS_BIND, l.Arg(), rawchild.Val(p.Buf(sa)),
		rawchild.Val(uintptr(len(sa))))
	p.Call("egress: listen", syscall.SYS_LISTEN, l.Arg(), rawchild.Val(128))
	msg := sendRights(p, l)
	p.Call("egress: send the listener to the server", syscall.SYS_SENDMSG, rawchild.Val(NetFD), rawchild.Val(msg), rawchild.Val(0))
	p.Expect(1)
	p.Call("egress: close the listener", syscall.SYS_CLOSE, l.Arg())
	p.Call("egress: close the socket to the server", syscall.SYS_CLOSE, rawchild.Val(NetFD))
}

// sendRights lays out a struct msghdr carrying the byte 'L' and, as
// SCM_RIGHTS, the descriptor slot fd holds when the message is sent (a
// store step puts it there), and returns its address.
func sendRights(p *rawchild.Prog, fd rawchild.Slot) uintptr {
	iov := make([]byte, unix.SizeofIovec) // struct iovec {void *base; size_t len}
	binary.NativeEndian.PutUint64(iov[0:], uint64(p.Str("L")))
	binary.NativeEndian.PutUint64(iov[8:], 1)
	cmsg, cmsgAt := p.Bytes(unix.CmsgSpace(4)) // struct cmsghdr {size_t len; int level, type}, then the descriptor
	binary.NativeEndian.PutUint64(cmsg[0:], uint64(unix.CmsgLen(4)))
	binary.NativeEndian.PutUint32(cmsg[8:], unix.SOL_SOCKET)
	binary.NativeEndian.PutUint32(cmsg[12:], unix.SCM_RIGHTS)
	p.Store32("egress: the listener into its message", cmsg, unix.CmsgLen(0), fd)
	msg := make([]byte, unix.SizeofMsghdr) // struct msghdr: name, namelen, iov, iovlen, control, controllen, flags
	binary.NativeEndian.PutUint64(msg[16:], uint64(p.Buf(iov)))
	binary.NativeEndian.PutUint64(msg[24:], 1)
	binary.NativeEndian.PutUint64(msg[32:], uint64(cmsgAt))
	binary.NativeEndian.PutUint64(msg[40:], uint64(len(cmsg)))
	return p.Buf(msg)
}
