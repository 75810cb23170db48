package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// HTTPFault is what an HTTPFaultProxy does to a request its rule matches.
type HTTPFault int

const (
	// FaultNone forwards the request.
	FaultNone HTTPFault = iota
	// FaultUnavailable answers 503 with a Kubernetes Status, as an API server that is
	// shutting down (or an overloaded one) does, without a Retry-After.
	FaultUnavailable
	// FaultDrop closes the connection without an answer: the API server went away in
	// the middle of the request.
	FaultDrop
	// FaultHang never answers: the request waits until the client gives up (its
	// context ends), as behind an API server or network that stopped answering.
	FaultHang
)

// HTTPFaultProxy is an HTTPS reverse proxy in front of the API server that fails the
// requests a rule picks (by method and path: a TCP Proxy cannot see inside TLS) and
// forwards every other one, watches included, with the caller's own credentials. Its
// serving certificate is its own: a client trusts CAPEM.
type HTTPFaultProxy struct {
	URL   string // https://127.0.0.1:PORT
	CAPEM []byte

	srv     *http.Server
	ln      net.Listener
	mu      sync.Mutex
	rule    func(*http.Request) HTTPFault
	faulted atomic.Int64
}

// StartHTTPFaultProxy starts a proxy to the cluster's API server that forwards
// everything until SetRule.
func (c *Cluster) StartHTTPFaultProxy() (*HTTPFaultProxy, error) {
	target, err := url.Parse(c.Admin.Host)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(c.Admin.CAData) {
		return nil, errors.New("the API server's CA is not PEM")
	}
	ca, err := NewCA("e2e-http-fault-proxy CA")
	if err != nil {
		return nil, err
	}
	serving, err := ca.ServerCert("127.0.0.1")
	if err != nil {
		return nil, err
	}
	cert, err := serving.TLSCertificate()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &HTTPFaultProxy{URL: "https://" + ln.Addr().String(), CAPEM: ca.CertPEM, ln: ln}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.FlushInterval = -1                    // watches stream
	rp.ErrorLog = log.New(io.Discard, "", 0) // a watch cancelled is no news
	rp.Transport = &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:   true,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		TLSHandshakeTimeout: 5 * time.Second,
	}
	p.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch p.fault(r) {
		case FaultUnavailable:
			p.faulted.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"e2e: the API server is unavailable","reason":"ServiceUnavailable","code":503}`)
			return
		case FaultDrop:
			p.faulted.Add(1)
			panic(http.ErrAbortHandler) // closes the connection (HTTP/2: resets the stream)
		case FaultHang:
			p.faulted.Add(1)
			<-r.Context().Done() // the client cancelled, or the proxy closed
			return
		}
		rp.ServeHTTP(w, r)
	}), ReadHeaderTimeout: 10 * time.Second, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
	go func() { _ = p.srv.ServeTLS(ln, "", "") }()
	return p, nil
}

func (p *HTTPFaultProxy) fault(r *http.Request) HTTPFault {
	p.mu.Lock()
	rule := p.rule
	p.mu.Unlock()
	if rule == nil {
		return FaultNone
	}
	return rule(r)
}

// SetRule decides from now on what happens to each request; nil forwards them all.
func (p *HTTPFaultProxy) SetRule(rule func(*http.Request) HTTPFault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rule = rule
}

// Faulted counts the requests failed so far.
func (p *HTTPFaultProxy) Faulted() int64 { return p.faulted.Load() }

// Close stops the proxy and closes its connections.
func (p *HTTPFaultProxy) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := p.srv.Shutdown(ctx); err != nil {
		return p.srv.Close()
	}
	return nil
}

// WriteKubeconfig writes a kubeconfig that authenticates as the ServiceAccount
// namespace/name (a TokenRequest token valid for ttl) and talks to the API server through
// the proxy.
func (p *HTTPFaultProxy) WriteKubeconfig(ctx context.Context, c *Cluster, path, namespace, name string, ttl time.Duration) error {
	tok, err := c.ServiceAccountToken(ctx, namespace, name, ttl)
	if err != nil {
		return err
	}
	user := namespace + "-" + name
	kc := clientcmdapi.NewConfig()
	kc.Clusters["via-fault-proxy"] = &clientcmdapi.Cluster{Server: p.URL, CertificateAuthorityData: p.CAPEM}
	kc.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: tok}
	kc.Contexts[user] = &clientcmdapi.Context{Cluster: "via-fault-proxy", AuthInfo: user, Namespace: namespace}
	kc.CurrentContext = user
	return writeKubeconfig(path, kc)
}
