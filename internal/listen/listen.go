// Package listen decides whether an address may be served without authentication. An unauthenticated
// codellm is remote code execution as a service, so the rule is strict and syntactic (openai-contract §1.2):
// an address is loopback when its host is the literal "localhost" (never resolved: /etc/hosts could say
// anything) or an IP literal in 127.0.0.0/8 or ::1. An empty host, 0.0.0.0, ::, LAN addresses and every
// other name are public.
package listen

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// IsLoopback reports whether addr ("host:port") names a loopback host.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	return IsLoopbackHost(host)
}

// IsLoopbackHost reports whether host (without port; brackets allowed) is loopback.
func IsLoopbackHost(host string) bool {
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	return ip.Unmap().IsLoopback()
}

// CheckPublic returns an error when addr is not loopback and nothing protects it. authenticated is true
// when an API key or client-certificate verification is configured.
func CheckPublic(addr string, authenticated, insecurePublic bool) error {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("--listen %q: %v", addr, err)
	}
	if IsLoopback(addr) || authenticated || insecurePublic {
		return nil
	}
	return fmt.Errorf("refusing to listen on non-loopback address %q without authentication: "+
		"set --api-key (or CODELLM_API_KEY) or --client-ca, or pass --insecure-public to accept "+
		"unauthenticated remote code execution", addr)
}
