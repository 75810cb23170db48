package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ProxyMode is how a Proxy treats its traffic.
type ProxyMode int

const (
	// ProxyPass forwards bytes as they come.
	ProxyPass ProxyMode = iota
	// ProxyDelay holds every chunk the upstream sends for the proxy's delay before the
	// client sees it (a slow API server or link: each round trip, the TLS handshake of a
	// new connection included, costs the delay once).
	ProxyDelay
	// ProxyDrop closes every open connection when set, and accepts and at once closes
	// new ones (a crashing or refusing upstream, seen as EOF/reset by the client).
	ProxyDrop
	// ProxyBlackhole forwards nothing in either direction, on open and new connections
	// alike, and closes nothing: the client waits until it gives up. Bytes held back
	// are delivered, in order, once the mode changes again.
	ProxyBlackhole
)

func (m ProxyMode) String() string {
	switch m {
	case ProxyPass:
		return "pass"
	case ProxyDelay:
		return "delay"
	case ProxyDrop:
		return "drop"
	case ProxyBlackhole:
		return "blackhole"
	}
	return fmt.Sprintf("ProxyMode(%d)", int(m))
}

// Proxy is a loopback TCP proxy that injects faults between a client and one
// upstream (here: between sar-bridge and kube-apiserver). It works on TCP only, so TLS
// passes through untouched: the client must trust the upstream's certificate for
// 127.0.0.1, which envtest's serving certificate covers.
type Proxy struct {
	// Addr is the proxy's listen address, 127.0.0.1:PORT.
	Addr string
	// Target is the upstream host:port.
	Target string

	ln net.Listener

	mu      sync.Mutex
	mode    ProxyMode
	delay   time.Duration
	changed chan struct{} // closed (and replaced) on every mode change
	conns   map[*proxyConn]struct{}
	closed  bool

	accepted atomic.Int64
	dropped  atomic.Int64
	wg       sync.WaitGroup
}

// StartProxy listens on a free 127.0.0.1 port and forwards to target (host:port, or a
// URL such as https://127.0.0.1:PORT) in ProxyPass mode.
func StartProxy(target string) (*Proxy, error) {
	target = strings.TrimPrefix(strings.TrimPrefix(target, "https://"), "http://")
	target = strings.TrimRight(target, "/")
	host, _, err := net.SplitHostPort(target)
	if err != nil {
		return nil, fmt.Errorf("proxy target %q: %w", target, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("proxy target %q is not a loopback address", target)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{
		Addr:    ln.Addr().String(),
		Target:  target,
		ln:      ln,
		changed: make(chan struct{}),
		conns:   map[*proxyConn]struct{}{},
	}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// URL is the proxy as an https:// URL, for a kubeconfig's server.
func (p *Proxy) URL() string { return "https://" + p.Addr }

// Mode returns the current mode and delay.
func (p *Proxy) Mode() (ProxyMode, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode, p.delay
}

// Pass forwards traffic again; bytes held back by ProxyDelay or ProxyBlackhole flow at
// once.
func (p *Proxy) Pass() { p.set(ProxyPass, 0) }

// Delay holds every chunk from the upstream for d before passing it on.
func (p *Proxy) Delay(d time.Duration) { p.set(ProxyDelay, d) }

// Drop closes every open connection and every new one as soon as it is accepted.
func (p *Proxy) Drop() { p.set(ProxyDrop, 0) }

// Blackhole stops forwarding in both directions without closing anything.
func (p *Proxy) Blackhole() { p.set(ProxyBlackhole, 0) }

// Accepted counts the connections accepted so far (dropped ones included).
func (p *Proxy) Accepted() int64 { return p.accepted.Load() }

// Dropped counts the connections closed by ProxyDrop (open ones when it was set, and
// new ones accepted while it holds).
func (p *Proxy) Dropped() int64 { return p.dropped.Load() }

// OpenConns reports how many proxied connections are open.
func (p *Proxy) OpenConns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

func (p *Proxy) set(m ProxyMode, d time.Duration) {
	p.mu.Lock()
	p.mode, p.delay = m, d
	close(p.changed)
	p.changed = make(chan struct{})
	var drop []*proxyConn
	if m == ProxyDrop {
		for c := range p.conns {
			drop = append(drop, c)
		}
	}
	p.mu.Unlock()
	for _, c := range drop {
		p.dropped.Add(1)
		c.close()
	}
}

// state returns the mode, the delay and a channel closed on the next change.
func (p *Proxy) state() (ProxyMode, time.Duration, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode, p.delay, p.changed
}

// Close stops listening, closes every connection and waits for the proxy's goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	err := p.ln.Close()
	for _, c := range conns {
		c.close()
	}
	p.wg.Wait()
	return err
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		p.accepted.Add(1)
		p.wg.Add(1)
		go p.handle(client)
	}
}

func (p *Proxy) handle(client net.Conn) {
	defer p.wg.Done()
	if mode, _, _ := p.state(); mode == ProxyDrop {
		p.dropped.Add(1)
		_ = client.Close()
		return
	}
	upstream, err := net.DialTimeout("tcp", p.Target, 5*time.Second)
	if err != nil {
		_ = client.Close()
		return
	}
	c := &proxyConn{client: client, upstream: upstream, done: make(chan struct{})}
	p.mu.Lock()
	if p.closed || p.mode == ProxyDrop {
		p.mu.Unlock()
		p.dropped.Add(1)
		c.close()
		return
	}
	p.conns[c] = struct{}{}
	p.mu.Unlock()

	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(c, client, upstream, false) }()
	go func() { defer wg.Done(); p.pipe(c, upstream, client, true) }()
	wg.Wait()
	c.close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// proxyConn is one proxied client connection and its upstream connection.
type proxyConn struct {
	client, upstream net.Conn
	once             sync.Once
	done             chan struct{}
}

func (c *proxyConn) close() {
	c.once.Do(func() {
		close(c.done)
		_ = c.client.Close()
		_ = c.upstream.Close()
	})
}

type chunk struct {
	data []byte
	at   time.Time // when it was read
}

// pipe copies src to dst, applying the mode to each chunk; delayed says whether
// ProxyDelay applies to this direction (upstream to client).
func (p *Proxy) pipe(c *proxyConn, src, dst net.Conn, delayed bool) {
	chunks := make(chan chunk, 256)
	go func() {
		defer close(chunks)
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				select {
				case chunks <- chunk{data: append([]byte(nil), buf[:n]...), at: time.Now()}:
				case <-c.done:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	defer c.close()
	for ch := range chunks {
		if !p.await(c, ch, delayed) {
			return
		}
		if _, err := dst.Write(ch.data); err != nil {
			return
		}
	}
}

// await blocks until ch may be written under the current mode; false when the
// connection is closed meanwhile.
func (p *Proxy) await(c *proxyConn, ch chunk, delayed bool) bool {
	for {
		mode, delay, changed := p.state()
		switch mode {
		case ProxyPass:
			return true
		case ProxyDrop:
			return false
		case ProxyDelay:
			if !delayed {
				return true
			}
			wait := time.Until(ch.at.Add(delay))
			if wait <= 0 {
				return true
			}
			t := time.NewTimer(wait)
			select {
			case <-t.C:
				return true
			case <-changed:
				t.Stop()
			case <-c.done:
				t.Stop()
				return false
			}
		case ProxyBlackhole:
			select {
			case <-changed:
			case <-c.done:
				return false
			}
		}
	}
}

// WriteServiceAccountKubeconfigVia writes a kubeconfig that authenticates as the
// ServiceAccount namespace/name (TokenRequest token valid for ttl) and talks to server
// (e.g. a Proxy's URL) while trusting the API server's CA.
func (c *Cluster) WriteServiceAccountKubeconfigVia(ctx context.Context, path, namespace, name, server string, ttl time.Duration) error {
	tok, err := c.ServiceAccountToken(ctx, namespace, name, ttl)
	if err != nil {
		return err
	}
	user := namespace + "-" + name
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest-via"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: c.Admin.CAData}
	kc.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: tok}
	kc.Contexts[user] = &clientcmdapi.Context{Cluster: "envtest-via", AuthInfo: user, Namespace: namespace}
	kc.CurrentContext = user
	return writeKubeconfig(path, kc)
}
