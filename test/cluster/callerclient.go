package cluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// Caller is an HTTP client of a bridge's public listener that authenticates like a
// real caller would: a Bearer token and/or a TLS client certificate, over plain HTTP or
// TLS with a custom CA. Each Caller has its own transport (no connection sharing).
type Caller struct {
	// BaseURL is the public listener, http:// or https://127.0.0.1:PORT.
	BaseURL string
	// Token, when set, is sent as "Authorization: Bearer <Token>".
	Token string
	// Header is added to every request.
	Header http.Header
	client *http.Client
}

// NewCaller returns a Caller of baseURL. tlsConfig (nil for plain HTTP) is used as is.
func NewCaller(baseURL string, tlsConfig *tls.Config, token string) *Caller {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		TLSClientConfig:     tlsConfig,
		TLSHandshakeTimeout: 5 * time.Second,
		MaxIdleConnsPerHost: 2,
	}
	return &Caller{BaseURL: strings.TrimRight(baseURL, "/"), Token: token, client: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

// ClientTLSConfig trusts only roots and presents certs (none: no client certificate).
func ClientTLSConfig(roots *x509.CertPool, certs ...tls.Certificate) *tls.Config {
	return &tls.Config{RootCAs: roots, Certificates: certs, MinVersion: tls.VersionTLS12}
}

// HTTPSURL is the bridge's public listener as an https:// URL (for a bridge started
// with --tls.server.cert-file).
func (b *Bridge) HTTPSURL() string {
	return "https://" + strings.TrimPrefix(b.URL, "http://")
}

// PublicAddr is the host:port of the bridge's public listener.
func (b *Bridge) PublicAddr() string {
	return strings.TrimPrefix(b.URL, "http://")
}

// Close drops the Caller's idle connections.
func (c *Caller) Close() { c.client.CloseIdleConnections() }

// Do sends a request to path and returns the status, headers and body.
func (c *Caller) Do(method, path, contentType string, body []byte) (int, http.Header, []byte, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, c.BaseURL+path, r)
	if err != nil {
		return 0, nil, nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for k, vs := range c.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	res, err := c.client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, data, err
}

// Send posts body to path and parses the answer like Bridge.Send; it also returns the
// response headers.
func (c *Caller) Send(path string, body []byte) (*Response, http.Header, error) {
	start := time.Now()
	code, header, data, err := c.Do(http.MethodPost, path, "application/json", body)
	if err != nil {
		return nil, nil, err
	}
	return parseResponse(code, data, time.Since(start)), header, nil
}

// DecideAt posts {"input": input} to path.
func (c *Caller) DecideAt(path string, input any) (*Response, http.Header, error) {
	body, err := json.Marshal(map[string]any{"input": input})
	if err != nil {
		return nil, nil, err
	}
	return c.Send(path, body)
}

// Decide posts {"input": input} to the decision endpoint.
func (c *Caller) Decide(input any) (*Response, error) {
	r, _, err := c.DecideAt(DecisionPath, input)
	return r, err
}

// Handshake opens a fresh TLS connection to addr with cfg, completes the handshake
// and returns the connection state (the server's certificate chain, version, suite).
func Handshake(addr string, cfg *tls.Config) (tls.ConnectionState, error) {
	d := &net.Dialer{Timeout: 5 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", addr, cfg)
	if err != nil {
		return tls.ConnectionState{}, err
	}
	defer conn.Close()
	st := conn.ConnectionState()
	if len(st.PeerCertificates) == 0 {
		return st, fmt.Errorf("%s sent no certificate", addr)
	}
	return st, nil
}
