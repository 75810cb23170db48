package authn

import (
	"net"
	"net/netip"
	"strings"
)

// IsLoopback reports whether a listen address ("host:port", or a bare host)
// binds only to loopback: 127.0.0.0/8, ::1 (also IPv4-mapped) or
// "localhost". An empty host (":8080") and unspecified addresses (0.0.0.0,
// ::) bind every interface and are not loopback; neither is any other name,
// since it could resolve anywhere.
func IsLoopback(listenAddr string) bool {
	host, _, err := net.SplitHostPort(listenAddr)
	if err != nil {
		// No port: accept a bare host such as "127.0.0.1", "::1" or "[::1]".
		host = strings.TrimSuffix(strings.TrimPrefix(listenAddr, "["), "]")
	}
	if host == "" {
		return false
	}
	if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	return ip.Unmap().IsLoopback()
}
