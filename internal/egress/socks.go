package egress

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"time"
)

// SOCKS5 (RFC 1928) reply codes used here.
const (
	socksOK           = 0
	socksNotAllowed   = 2
	socksUnreachable  = 4
	socksCmdUnsupport = 7
	socksAddrUnsupp   = 8
)

// socks serves one SOCKS5 CONNECT without authentication. A domain-name
// destination (socks5h://) is the normal case; an address-type request
// is a raw IP and follows the raw-IP rule.
func (s *Session) socks(c net.Conn, br *bufio.Reader, cr *capReader) {
	d := dest{proto: "socks5"}
	var hdr [2]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return
	}
	methods := make([]byte, hdr[1])
	if _, err := io.ReadFull(br, methods); err != nil {
		return
	}
	noAuth := false
	for _, m := range methods {
		noAuth = noAuth || m == 0
	}
	if !noAuth {
		_, _ = c.Write([]byte{5, 0xff})
		s.record(d, refuse("bad_request", "SOCKS5 client offers no method without authentication"))
		return
	}
	if _, err := c.Write([]byte{5, 0}); err != nil {
		return
	}
	var req [4]byte
	if _, err := io.ReadFull(br, req[:]); err != nil {
		return
	}
	if req[0] != 5 || req[1] != 1 {
		socksReply(c, socksCmdUnsupport)
		s.record(d, refuse("bad_request", "SOCKS5 command %d is not CONNECT", req[1]))
		return
	}
	host, ok := socksHost(br, req[3])
	if !ok {
		socksReply(c, socksAddrUnsupp)
		s.record(d, refuse("bad_request", "SOCKS5 address type %d", req[3]))
		return
	}
	var pb [2]byte
	if _, err := io.ReadFull(br, pb[:]); err != nil {
		return
	}
	d.host, d.port = host, binary.BigEndian.Uint16(pb[:])
	_ = c.SetReadDeadline(time.Time{})
	cr.lift()
	up, err := s.dial(d)
	s.record(d, err)
	if err != nil {
		code := byte(socksNotAllowed)
		if r, ok := err.(*refusal); ok && (r.reason == "dial_failed" || r.reason == "resolve_failed") {
			code = socksUnreachable
		}
		socksReply(c, code)
		return
	}
	defer up.Close()
	socksReply(c, socksOK)
	s.relay(c, br, up, d)
}

func socksHost(br *bufio.Reader, atyp byte) (string, bool) {
	switch atyp {
	case 1, 4:
		b := make([]byte, 4)
		if atyp == 4 {
			b = make([]byte, 16)
		}
		if _, err := io.ReadFull(br, b); err != nil {
			return "", false
		}
		a, _ := netip.AddrFromSlice(b)
		return a.String(), true
	case 3:
		n, err := br.ReadByte()
		if err != nil || n == 0 {
			return "", false
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(br, b); err != nil {
			return "", false
		}
		return string(b), true
	}
	return "", false
}

// socksReply answers with a zero bound address: the client never needs it.
func socksReply(c net.Conn, code byte) {
	_, _ = c.Write([]byte{5, code, 0, 1, 0, 0, 0, 0, 0, 0})
}
