//go:build linux

package hook

import (
	"syscall"
	"unsafe"
)

// setupEgress runs inside the block's fresh network namespace, before
// capabilities are dropped: it brings up lo (a new namespace's loopback is
// down), listens on 127.0.0.1:EgressPort and sends that socket to the
// server on NetFD. A socket stays in the namespace it was created in, so
// the server accepts connections from inside the namespace while the
// namespace itself keeps no route anywhere else.
func setupEgress() error {
	s, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return wrap("egress: socket for ioctl", err)
	}
	// struct ifreq: char ifr_name[16], then a union whose first member
	// here is short ifr_flags; 40 bytes on 64-bit Linux.
	var ifr [40]byte
	copy(ifr[:], "lo")
	flags := uint16(syscall.IFF_UP | syscall.IFF_RUNNING)
	ifr[16], ifr[17] = byte(flags), byte(flags>>8)
	_, _, e := syscall.RawSyscall(syscall.SYS_IOCTL, uintptr(s), syscall.SIOCSIFFLAGS, uintptr(unsafe.Pointer(&ifr[0])))
	syscall.Close(s)
	if e != 0 {
		return wrap("egress: bring up lo", e)
	}
	l, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return wrap("egress: listening socket", err)
	}
	defer syscall.Close(l)
	if err := syscall.Bind(l, &syscall.SockaddrInet4{Port: EgressPort, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return wrap("egress: bind 127.0.0.1:"+itoa(EgressPort), err)
	}
	if err := syscall.Listen(l, 128); err != nil {
		return wrap("egress: listen", err)
	}
	if err := syscall.Sendmsg(NetFD, []byte{'L'}, syscall.UnixRights(l), nil, 0); err != nil {
		return wrap("egress: send the listener to the server", err)
	}
	syscall.Close(NetFD)
	return nil
}
