// Package tlsserving builds server TLS configurations whose certificate is
// reloaded from disk, so rotated certificates (cert-manager, Secret volume
// updates) are served without a restart.
package tlsserving

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
)

// DefaultReloadInterval is how often the certificate files are checked.
const DefaultReloadInterval = 10 * time.Second

// Options configures New.
type Options struct {
	// CertFile and KeyFile are the PEM serving certificate (chain) and key.
	CertFile, KeyFile string
	// MinVersion is "VersionTLS12" or "VersionTLS13" (the default).
	MinVersion string
	// CipherSuites are IANA names (e.g. TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256)
	// for TLS 1.2; TLS 1.3 suites are not configurable. Empty means Go's
	// defaults. Unknown and insecure names are errors, and so is a list
	// without an ECDHE AES-128-GCM suite (HTTP/2 requires one).
	CipherSuites []string
	// ClientCAs, if set, makes the server ask for client certificates signed
	// by the returned pool, consulted at every handshake so a reloaded CA
	// bundle applies to new connections (authn.Filter.ClientCAs).
	ClientCAs func() *x509.CertPool
	// RequireClientCert, with ClientCAs, rejects handshakes without a valid
	// client certificate (tls.RequireAndVerifyClientCert). Without it a
	// certificate is verified if given (tls.VerifyClientCertIfGiven) and the
	// authn filter answers certificate-less requests with a JSON 401. Use it
	// only when every client of the listener must present a certificate,
	// i.e. authn mode mtls, and nothing else (probes) uses the listener.
	RequireClientCert bool
	// ReloadInterval is how often the files are re-read; zero means
	// DefaultReloadInterval.
	ReloadInterval time.Duration
	Logger         log.Logger
}

// New loads the certificate and returns a server config that serves the
// latest good certificate from CertFile/KeyFile, checked every
// ReloadInterval until ctx is done. It fails if the pair cannot be loaded now.
//
// The config serves certificates through GetCertificate: do not set
// Certificates on it (crypto/tls would prefer them for clients without SNI).
// Use it with http.Server{TLSConfig: cfg}.ServeTLS(ln, "", "").
// NextProtos is preset to h2 and http/1.1 because per-handshake configs
// (client CAs) do not inherit the ALPN list http.Server adds to its own copy.
func New(ctx context.Context, opts Options) (*tls.Config, error) {
	if opts.CertFile == "" || opts.KeyFile == "" {
		return nil, fmt.Errorf("tls: both a certificate file and a key file are required (cert %q, key %q)", opts.CertFile, opts.KeyFile)
	}
	minVersion, err := ParseVersion(opts.MinVersion)
	if err != nil {
		return nil, err
	}
	suites, err := ParseCipherSuites(opts.CipherSuites)
	if err != nil {
		return nil, err
	}
	if opts.RequireClientCert && opts.ClientCAs == nil {
		return nil, fmt.Errorf("tls: requiring client certificates needs client CAs")
	}
	if opts.ReloadInterval < 0 {
		return nil, fmt.Errorf("tls: reload interval must not be negative, got %s", opts.ReloadInterval)
	}
	interval := opts.ReloadInterval
	if interval == 0 {
		interval = DefaultReloadInterval
	}
	logger := opts.Logger
	if logger == nil {
		logger = log.NewNopLogger()
	}
	if len(suites) > 0 && minVersion >= tls.VersionTLS13 {
		level.Warn(logger).Log("msg", "TLS cipher suites only apply to TLS 1.2, which the minimum version excludes", "min_version", opts.MinVersion)
	}
	// net/http refuses to serve HTTP/2 (ServeTLS fails) with a TLS 1.2 list
	// lacking these; fail here, at startup, with the reason.
	if len(suites) > 0 && minVersion < tls.VersionTLS13 &&
		!slices.Contains(suites, tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256) &&
		!slices.Contains(suites, tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256) {
		return nil, fmt.Errorf("tls: cipher suites must include TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 or TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 (required by HTTP/2)")
	}

	r := &reloader{certFile: opts.CertFile, keyFile: opts.KeyFile, logger: logger}
	if _, err := r.load(); err != nil {
		return nil, err
	}
	go r.run(ctx, interval)

	cfg := &tls.Config{
		MinVersion:     minVersion,
		CipherSuites:   suites,
		GetCertificate: r.getCertificate,
		NextProtos:     []string{"h2", "http/1.1"},
	}
	if opts.ClientCAs != nil {
		clientAuth := tls.VerifyClientCertIfGiven
		if opts.RequireClientCert {
			clientAuth = tls.RequireAndVerifyClientCert
		}
		cfg.ClientAuth = clientAuth
		cfg.ClientCAs = nonNilPool(opts.ClientCAs)
		cfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
			// A fresh pool per handshake: tls.Config.ClientCAs is static.
			c := cfg.Clone()
			c.GetConfigForClient = nil
			c.ClientCAs = nonNilPool(opts.ClientCAs)
			return c, nil
		}
	}
	return cfg, nil
}

// nonNilPool guards against a nil pool, which crypto/tls would treat as
// "verify against the system roots".
func nonNilPool(f func() *x509.CertPool) *x509.CertPool {
	if p := f(); p != nil {
		return p
	}
	return x509.NewCertPool()
}

// ParseVersion maps "VersionTLS12"/"VersionTLS13" to its constant; "" is
// TLS 1.3. Older versions are refused.
func ParseVersion(name string) (uint16, error) {
	switch name {
	case "", "VersionTLS13":
		return tls.VersionTLS13, nil
	case "VersionTLS12":
		return tls.VersionTLS12, nil
	default:
		return 0, fmt.Errorf("tls: unsupported minimum version %q (want VersionTLS12 or VersionTLS13)", name)
	}
}

// ParseCipherSuites maps IANA cipher suite names to IDs. Names Go considers
// insecure are refused rather than silently weakening the listener.
func ParseCipherSuites(names []string) ([]uint16, error) {
	if len(names) == 0 {
		return nil, nil
	}
	ids := make([]uint16, 0, len(names))
	for _, name := range names {
		id, err := cipherSuiteID(name)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

func cipherSuiteID(name string) (uint16, error) {
	for _, s := range tls.CipherSuites() {
		if s.Name == name {
			return s.ID, nil
		}
	}
	for _, s := range tls.InsecureCipherSuites() {
		if s.Name == name {
			return 0, fmt.Errorf("tls: cipher suite %q is insecure and not allowed", name)
		}
	}
	return 0, fmt.Errorf("tls: unknown cipher suite %q", name)
}

// reloader keeps the last good key pair read from disk.
type reloader struct {
	certFile, keyFile string
	logger            log.Logger
	cert              atomic.Pointer[tls.Certificate]

	// Only touched by load (New, then the run goroutine).
	certPEM, keyPEM []byte
	lastBad         [sha256.Size]byte
}

func (r *reloader) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.cert.Load(), nil
}

func (r *reloader) run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if fp, err := r.load(); err != nil && fp != r.lastBad {
			// Files are often rewritten one after the other, so a broken pair
			// can be transient or persist for many ticks: log each distinct
			// broken content once.
			r.lastBad = fp
			level.Error(r.logger).Log("msg", "not reloading TLS certificate, serving the previous one",
				"cert_file", r.certFile, "key_file", r.keyFile, "err", err)
		}
	}
}

// load reads both files and swaps in the pair if it changed and is valid.
// On error it returns a fingerprint of what it read, to de-duplicate logs.
func (r *reloader) load() ([sha256.Size]byte, error) {
	certPEM, err := os.ReadFile(r.certFile)
	if err != nil {
		err = fmt.Errorf("tls: reading certificate file: %w", err)
		return sha256.Sum256([]byte(err.Error())), err
	}
	keyPEM, err := os.ReadFile(r.keyFile)
	if err != nil {
		err = fmt.Errorf("tls: reading key file: %w", err)
		return sha256.Sum256([]byte(err.Error())), err
	}
	if r.cert.Load() != nil && bytes.Equal(certPEM, r.certPEM) && bytes.Equal(keyPEM, r.keyPEM) {
		return [sha256.Size]byte{}, nil
	}
	fp := sha256.Sum256(slices.Concat(certPEM, []byte{0}, keyPEM))
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fp, fmt.Errorf("tls: loading key pair from %q and %q: %w", r.certFile, r.keyFile, err)
	}
	if pair.Leaf == nil {
		if pair.Leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return fp, fmt.Errorf("tls: parsing certificate %q: %w", r.certFile, err)
		}
	}
	r.certPEM, r.keyPEM = certPEM, keyPEM
	r.lastBad = [sha256.Size]byte{}
	r.cert.Store(&pair)
	level.Info(r.logger).Log("msg", "loaded TLS certificate", "cert_file", r.certFile,
		"subject", pair.Leaf.Subject.String(), "serial", pair.Leaf.SerialNumber.String(),
		"not_after", pair.Leaf.NotAfter.UTC().Format(time.RFC3339))
	return [sha256.Size]byte{}, nil
}
