package interlink

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"strings"
	"time"
)

// Plugin is where the relay forwards: the real interLink plugin, over HTTP or a unix
// socket (the two transports interLink itself speaks to a plugin).
type Plugin struct {
	// URL is the base every request path is appended to; for a socket it is
	// http://localhost and only the socket decides where the bytes go.
	URL *url.URL
	// Socket is the plugin's unix socket, or "".
	Socket string
}

// ParsePluginURL reads http://host:port[/prefix] or unix:///path.
func ParsePluginURL(s string) (Plugin, error) {
	u, err := url.Parse(s)
	if err != nil {
		return Plugin{}, fmt.Errorf("plugin URL %q: %w", s, err)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return Plugin{}, fmt.Errorf("plugin URL %q: want http://host:port[/prefix] or unix:///path, without credentials, query or fragment", s)
	}
	switch u.Scheme {
	case "http":
		if u.Host == "" || u.Hostname() == "" {
			return Plugin{}, fmt.Errorf("plugin URL %q has no host", s)
		}
		base := &url.URL{Scheme: "http", Host: u.Host, Path: strings.TrimRight(u.Path, "/")}
		return Plugin{URL: base}, nil
	case "unix":
		if u.Host != "" || !path.IsAbs(u.Path) || path.Clean(u.Path) != u.Path {
			return Plugin{}, fmt.Errorf("plugin URL %q: want unix:///absolute/path/to/socket", s)
		}
		return Plugin{URL: &url.URL{Scheme: "http", Host: "localhost"}, Socket: u.Path}, nil
	}
	return Plugin{}, fmt.Errorf("plugin URL %q: scheme must be http or unix (interLink's plugins speak no https)", s)
}

func (p Plugin) String() string {
	if p.Socket != "" {
		return "unix://" + p.Socket
	}
	return p.URL.String()
}

// transport reaches the plugin. It never uses an HTTP proxy from the environment and
// asks for no compression, so the plugin's answer reaches interLink as it was written.
func (p Plugin) transport(dialTimeout, headerTimeout time.Duration) *http.Transport {
	dialer := &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
	dial := dialer.DialContext
	if p.Socket != "" {
		dial = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, "unix", p.Socket)
		}
	}
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           dial,
		ResponseHeaderTimeout: headerTimeout,
		DisableCompression:    true,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
	}
}

// ListenAddress is where the relay listens: a TCP host:port or a unix socket.
type ListenAddress struct {
	Network string // "tcp" or "unix"
	Address string
}

// ParseListenAddress reads host:port or unix:///path.
func ParseListenAddress(s string) (ListenAddress, error) {
	if strings.HasPrefix(s, "unix:") {
		u, err := url.Parse(s)
		if err != nil || u.Host != "" || !path.IsAbs(u.Path) || path.Clean(u.Path) != u.Path || u.RawQuery != "" {
			return ListenAddress{}, fmt.Errorf("listen address %q: want unix:///absolute/path/to/socket", s)
		}
		return ListenAddress{Network: "unix", Address: u.Path}, nil
	}
	if _, _, err := net.SplitHostPort(s); err != nil {
		return ListenAddress{}, fmt.Errorf("listen address %q: want host:port or unix:///path: %w", s, err)
	}
	return ListenAddress{Network: "tcp", Address: s}, nil
}

func (l ListenAddress) String() string {
	if l.Network == "unix" {
		return "unix://" + l.Address
	}
	return l.Address
}

// Loopback reports whether only this host can connect: a unix socket, or a TCP address
// on a loopback IP or "localhost". An empty host (":9000") is every interface.
func (l ListenAddress) Loopback() bool {
	if l.Network == "unix" {
		return true
	}
	host, _, err := net.SplitHostPort(l.Address)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// socketMode lets a sidecar in the same pod (same fsGroup) connect, and no one else.
const socketMode = 0o660

// Listen opens the listener. A socket file left by a process that is gone is removed
// first; a live one, or a file that is not a socket, is an error.
func Listen(l ListenAddress) (net.Listener, error) {
	if l.Network != "unix" {
		return net.Listen("tcp", l.Address)
	}
	if err := removeStaleSocket(l.Address); err != nil {
		return nil, err
	}
	ln, err := net.Listen("unix", l.Address)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(l.Address, socketMode); err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("chmod %s: %w", l.Address, err)
	}
	return ln, nil
}

func removeStaleSocket(p string) error {
	fi, err := os.Lstat(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("%s exists and is not a socket", p)
	}
	if conn, err := net.DialTimeout("unix", p, 200*time.Millisecond); err == nil {
		_ = conn.Close()
		return fmt.Errorf("%s is in use by another process", p)
	}
	if err := os.Remove(p); err != nil {
		return fmt.Errorf("removing stale socket: %w", err)
	}
	return nil
}
