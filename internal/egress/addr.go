package egress

import "net/netip"

// special lists address ranges that are never a public destination,
// beyond what netip's predicates cover.
var special = []struct {
	prefix netip.Prefix
	reason string
}{
	{netip.MustParsePrefix("169.254.169.254/32"), "metadata"},
	{netip.MustParsePrefix("100.100.100.200/32"), "metadata"}, // Alibaba Cloud
	{netip.MustParsePrefix("fd00:ec2::254/128"), "metadata"},  // AWS IMDS over IPv6
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified"},
	{netip.MustParsePrefix("100.64.0.0/10"), "private"}, // carrier-grade NAT
	{netip.MustParsePrefix("192.0.0.0/24"), "private"},  // IETF protocol assignments
	{netip.MustParsePrefix("198.18.0.0/15"), "private"}, // benchmarking
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},  // includes the broadcast address
	{netip.MustParsePrefix("64:ff9b::/96"), "translated"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "translated"},
	{netip.MustParsePrefix("2002::/16"), "translated"}, // 6to4 embeds an IPv4 address
	{netip.MustParsePrefix("2001::/32"), "translated"}, // Teredo
	{netip.MustParsePrefix("fec0::/10"), "private"},    // deprecated site-local
}

// Blocked says why a is not a public destination ("" when it is):
// loopback, private, link-local, metadata, multicast, unspecified,
// reserved or a translation prefix that can embed any IPv4 address.
func Blocked(a netip.Addr) string {
	a = a.Unmap()
	for _, s := range special {
		if s.prefix.Contains(a) {
			return s.reason
		}
	}
	switch {
	case !a.IsValid():
		return "invalid"
	case a.IsLoopback():
		return "loopback"
	case a.IsPrivate():
		return "private"
	case a.IsLinkLocalUnicast():
		return "link-local"
	case a.IsMulticast(), a.IsLinkLocalMulticast(), a.IsInterfaceLocalMulticast():
		return "multicast"
	case a.IsUnspecified():
		return "unspecified"
	}
	return ""
}
