package tlsserving

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	stdlog "log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-kit/log"
)

// issue creates a certificate signed by parent (self-signed when parent is
// nil) and returns it with its PEM encodings.
func issue(t *testing.T, serial int64, cn string, parent *x509.Certificate, parentKey crypto.Signer, isCA bool, usage x509.ExtKeyUsage) (*x509.Certificate, crypto.Signer, []byte, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	if isCA {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
		tmpl.ExtKeyUsage = nil
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key,
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
}

func servingPair(t *testing.T, serial int64) (certPEM, keyPEM []byte) {
	t.Helper()
	_, _, c, k := issue(t, serial, "sar-bridge", nil, nil, false, x509.ExtKeyUsageServerAuth)
	return c, k
}

type files struct{ cert, key string }

func writePair(t *testing.T, dir string, certPEM, keyPEM []byte) files {
	t.Helper()
	f := files{filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")}
	writeFile(t, f.cert, certPEM)
	writeFile(t, f.key, keyPEM)
	return f
}

// writeFile replaces path atomically, as a Secret volume update does.
func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// serve runs an http.Server with cfg the way main.go does and returns its
// address.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
				w.Header().Set("X-Client-CN", r.TLS.PeerCertificates[0].Subject.CommonName)
			}
			_, _ = io.WriteString(w, "ok")
		}),
		TLSConfig:         cfg,
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          stdlog.New(io.Discard, "", 0), // failed handshakes are expected here
	}
	go func() {
		if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("ServeTLS: %v", err)
		}
	}()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// dial makes a new TLS connection and returns its state.
func dial(addr string, cfg *tls.Config) (tls.ConnectionState, error) {
	if cfg == nil {
		cfg = &tls.Config{}
	}
	cfg.InsecureSkipVerify = true // the test checks the served certificate itself
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return tls.ConnectionState{}, err
	}
	defer conn.Close()
	return conn.ConnectionState(), nil
}

func servedSerial(t *testing.T, addr string) int64 {
	t.Helper()
	st, err := dial(addr, nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	return st.PeerCertificates[0].SerialNumber.Int64()
}

func waitForSerial(t *testing.T, addr string, want int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := servedSerial(t, addr)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("served serial %d, want %d after reload", got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// syncBuffer is a log sink safe for the reload goroutine and the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

const interval = 10 * time.Millisecond

func TestReload(t *testing.T) {
	dir := t.TempDir()
	c, k := servingPair(t, 1)
	f := writePair(t, dir, c, k)
	cfg, err := New(t.Context(), Options{CertFile: f.cert, KeyFile: f.key, ReloadInterval: interval})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, cfg)
	if got := servedSerial(t, addr); got != 1 {
		t.Fatalf("initial serial %d, want 1", got)
	}

	c, k = servingPair(t, 2)
	writePair(t, dir, c, k)
	waitForSerial(t, addr, 2)
}

func TestBrokenReloadKeepsPreviousCertificate(t *testing.T) {
	dir := t.TempDir()
	c1, k1 := servingPair(t, 1)
	f := writePair(t, dir, c1, k1)
	logs := &syncBuffer{}
	cfg, err := New(t.Context(), Options{CertFile: f.cert, KeyFile: f.key, ReloadInterval: interval, Logger: log.NewLogfmtLogger(logs)})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, cfg)

	const failure = "not reloading TLS certificate"
	waitForLog := func(n int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for strings.Count(logs.String(), failure) < n {
			if time.Now().After(deadline) {
				t.Fatalf("want %d reload failures logged; logs:\n%s", n, logs)
			}
			time.Sleep(interval)
		}
	}

	for i, broken := range []struct {
		name      string
		cert, key []byte
	}{
		{"garbage certificate", []byte("not a certificate"), k1},
		{"certificate not matching the key", func() []byte { c, _ := servingPair(t, 3); return c }(), k1},
		{"empty key", c1, nil},
	} {
		writePair(t, dir, broken.cert, broken.key)
		waitForLog(i + 1)
		// Let several more checks run over the same broken files.
		time.Sleep(10 * interval)
		if got := servedSerial(t, addr); got != 1 {
			t.Fatalf("%s: serving serial %d, want the previous certificate (1)", broken.name, got)
		}
		if n := strings.Count(logs.String(), failure); n != i+1 {
			t.Errorf("%s: %d failures logged, want each broken content logged once (%d)", broken.name, n, i+1)
		}
	}

	// A good pair is still picked up afterwards.
	c4, k4 := servingPair(t, 4)
	writePair(t, dir, c4, k4)
	waitForSerial(t, addr, 4)
}

func TestMissingFileOnReloadKeepsPreviousCertificate(t *testing.T) {
	dir := t.TempDir()
	c, k := servingPair(t, 1)
	f := writePair(t, dir, c, k)
	cfg, err := New(t.Context(), Options{CertFile: f.cert, KeyFile: f.key, ReloadInterval: interval})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, cfg)
	if err := os.Remove(f.key); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * interval)
	if got := servedSerial(t, addr); got != 1 {
		t.Fatalf("serving serial %d, want 1", got)
	}
}

func TestMinVersion(t *testing.T) {
	c, k := servingPair(t, 1)
	f := writePair(t, t.TempDir(), c, k)
	for _, tc := range []struct {
		name       string
		minVersion string
		clientMax  uint16
		wantErr    bool
	}{
		{"default rejects a TLS 1.2 client", "", tls.VersionTLS12, true},
		{"default serves TLS 1.3", "", tls.VersionTLS13, false},
		{"explicit 1.3 rejects a TLS 1.2 client", "VersionTLS13", tls.VersionTLS12, true},
		{"1.2 serves a TLS 1.2 client", "VersionTLS12", tls.VersionTLS12, false},
		{"1.2 serves TLS 1.3", "VersionTLS12", tls.VersionTLS13, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := New(t.Context(), Options{CertFile: f.cert, KeyFile: f.key, MinVersion: tc.minVersion})
			if err != nil {
				t.Fatal(err)
			}
			addr := serve(t, cfg)
			st, err := dial(addr, &tls.Config{MaxVersion: tc.clientMax})
			if tc.wantErr {
				if err == nil {
					t.Fatalf("handshake succeeded with version %x", st.Version)
				}
				return
			}
			if err != nil {
				t.Fatalf("handshake: %v", err)
			}
			if st.Version != tc.clientMax {
				t.Errorf("version %x, want %x", st.Version, tc.clientMax)
			}
		})
	}
}

func TestCipherSuites(t *testing.T) {
	c, k := servingPair(t, 1)
	f := writePair(t, t.TempDir(), c, k)
	cfg, err := New(t.Context(), Options{
		CertFile: f.cert, KeyFile: f.key, MinVersion: "VersionTLS12",
		CipherSuites: []string{"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384}
	if len(cfg.CipherSuites) != 2 || cfg.CipherSuites[0] != want[0] || cfg.CipherSuites[1] != want[1] {
		t.Fatalf("CipherSuites = %v, want %v", cfg.CipherSuites, want)
	}
	addr := serve(t, cfg)
	st, err := dial(addr, &tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384}})
	if err != nil || st.CipherSuite != tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384 {
		t.Errorf("negotiated %x, %v", st.CipherSuite, err)
	}
	if _, err := dial(addr, &tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256}}); err == nil {
		t.Errorf("a suite outside the list was negotiated")
	}
}

func TestNewErrors(t *testing.T) {
	dir := t.TempDir()
	c1, k1 := servingPair(t, 1)
	_, k2 := servingPair(t, 2)
	good := writePair(t, dir, c1, k1)
	mismatchedKey := filepath.Join(dir, "other.key")
	writeFile(t, mismatchedKey, k2)
	pool := func() *x509.CertPool { return x509.NewCertPool() }

	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"no files", Options{}, "both a certificate file and a key file"},
		{"missing cert file", Options{CertFile: filepath.Join(dir, "nope.crt"), KeyFile: good.key}, "reading certificate file"},
		{"missing key file", Options{CertFile: good.cert, KeyFile: filepath.Join(dir, "nope.key")}, "reading key file"},
		{"mismatched pair", Options{CertFile: good.cert, KeyFile: mismatchedKey}, "loading key pair"},
		{"unknown cipher suite", Options{CertFile: good.cert, KeyFile: good.key, MinVersion: "VersionTLS12", CipherSuites: []string{"TLS_NOPE"}}, `unknown cipher suite "TLS_NOPE"`},
		{"insecure cipher suite", Options{CertFile: good.cert, KeyFile: good.key, MinVersion: "VersionTLS12", CipherSuites: []string{"TLS_RSA_WITH_RC4_128_SHA"}}, "insecure"},
		{"suites HTTP/2 cannot use", Options{CertFile: good.cert, KeyFile: good.key, MinVersion: "VersionTLS12", CipherSuites: []string{"TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"}}, "required by HTTP/2"},
		{"TLS 1.1", Options{CertFile: good.cert, KeyFile: good.key, MinVersion: "VersionTLS11"}, "unsupported minimum version"},
		{"lower-case version", Options{CertFile: good.cert, KeyFile: good.key, MinVersion: "tls12"}, "unsupported minimum version"},
		{"required client cert without CAs", Options{CertFile: good.cert, KeyFile: good.key, RequireClientCert: true}, "needs client CAs"},
		{"negative interval", Options{CertFile: good.cert, KeyFile: good.key, ClientCAs: pool, ReloadInterval: -time.Second}, "must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(t.Context(), tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestClientCAs(t *testing.T) {
	dir := t.TempDir()
	c, k := servingPair(t, 1)
	f := writePair(t, dir, c, k)

	ca1, ca1Key, _, _ := issue(t, 10, "ca-1", nil, nil, true, 0)
	ca2, ca2Key, _, _ := issue(t, 20, "ca-2", nil, nil, true, 0)
	clientCert := func(ca *x509.Certificate, caKey crypto.Signer, cn string) tls.Certificate {
		_, _, cp, kp := issue(t, 30, cn, ca, caKey, false, x509.ExtKeyUsageClientAuth)
		pair, err := tls.X509KeyPair(cp, kp)
		if err != nil {
			t.Fatal(err)
		}
		return pair
	}
	fromCA1 := clientCert(ca1, ca1Key, "alice")
	fromCA2 := clientCert(ca2, ca2Key, "bob")

	var current atomic.Pointer[x509.CertPool]
	pool1 := x509.NewCertPool()
	pool1.AddCert(ca1)
	current.Store(pool1)
	clientCAs := func() *x509.CertPool { return current.Load() }

	// get sends certs[0], if any, even when the server's acceptable CAs do
	// not name its issuer (Go clients would otherwise send nothing), so the
	// server's verification is what is tested.
	get := func(t *testing.T, addr string, certs ...tls.Certificate) (*http.Response, error) {
		t.Helper()
		tr := &http.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true, GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
				if len(certs) == 0 {
					return &tls.Certificate{}, nil
				}
				return &certs[0], nil
			}},
			DisableKeepAlives: true,
			ForceAttemptHTTP2: true,
		}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get("https://" + addr + "/")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}

	t.Run("required", func(t *testing.T) {
		cfg, err := New(t.Context(), Options{CertFile: f.cert, KeyFile: f.key, ClientCAs: clientCAs, RequireClientCert: true})
		if err != nil {
			t.Fatal(err)
		}
		if cfg.ClientAuth != tls.RequireAndVerifyClientCert {
			t.Errorf("ClientAuth = %v", cfg.ClientAuth)
		}
		addr := serve(t, cfg)
		resp, err := get(t, addr, fromCA1)
		if err != nil {
			t.Fatalf("cert from the CA: %v", err)
		}
		if resp.Header.Get("X-Client-CN") != "alice" || resp.ProtoMajor != 2 {
			t.Errorf("CN %q over HTTP/%d, want alice over HTTP/2", resp.Header.Get("X-Client-CN"), resp.ProtoMajor)
		}
		if _, err := get(t, addr); err == nil {
			t.Errorf("no client cert accepted")
		}
		if _, err := get(t, addr, fromCA2); err == nil {
			t.Errorf("cert from another CA accepted")
		}

		// The server asks for certificates from the current pool.
		var acceptable [][]byte
		if _, err := dial(addr, &tls.Config{GetClientCertificate: func(cri *tls.CertificateRequestInfo) (*tls.Certificate, error) {
			acceptable = cri.AcceptableCAs
			return &fromCA1, nil
		}}); err != nil {
			t.Fatalf("dial: %v", err)
		}
		if len(acceptable) != 1 || !bytes.Equal(acceptable[0], ca1.RawSubject) {
			t.Errorf("acceptable CAs = %q, want the CA's subject", acceptable)
		}

		// A new pool applies to new handshakes.
		pool2 := x509.NewCertPool()
		pool2.AddCert(ca2)
		current.Store(pool2)
		t.Cleanup(func() { current.Store(pool1) })
		if _, err := get(t, addr, fromCA2); err != nil {
			t.Errorf("after CA rotation, cert from the new CA: %v", err)
		}
		if _, err := get(t, addr, fromCA1); err == nil {
			t.Errorf("after CA rotation, cert from the old CA accepted")
		}
	})

	t.Run("verified if given", func(t *testing.T) {
		cfg, err := New(t.Context(), Options{CertFile: f.cert, KeyFile: f.key, ClientCAs: clientCAs})
		if err != nil {
			t.Fatal(err)
		}
		if cfg.ClientAuth != tls.VerifyClientCertIfGiven {
			t.Errorf("ClientAuth = %v", cfg.ClientAuth)
		}
		addr := serve(t, cfg)
		if resp, err := get(t, addr); err != nil || resp.Header.Get("X-Client-CN") != "" {
			t.Errorf("no client cert: %v", err)
		}
		if resp, err := get(t, addr, fromCA1); err != nil || resp.Header.Get("X-Client-CN") != "alice" {
			t.Errorf("cert from the CA: %v", err)
		}
		if _, err := get(t, addr, fromCA2); err == nil {
			t.Errorf("cert from another CA accepted")
		}
	})

	t.Run("nil pool trusts nothing", func(t *testing.T) {
		cfg, err := New(t.Context(), Options{CertFile: f.cert, KeyFile: f.key, ClientCAs: func() *x509.CertPool { return nil }})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := get(t, serve(t, cfg), fromCA1); err == nil {
			t.Errorf("client cert accepted with a nil pool")
		}
	})
}

// httptest servers can use the config too, as long as the client sends SNI
// (httptest adds its own Certificates, which crypto/tls prefers without SNI).
func TestWithHTTPTest(t *testing.T) {
	c, k := servingPair(t, 7)
	f := writePair(t, t.TempDir(), c, k)
	cfg, err := New(t.Context(), Options{CertFile: f.cert, KeyFile: f.key})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.TLS = cfg
	srv.StartTLS()
	defer srv.Close()
	st, err := dial(srv.Listener.Addr().String(), &tls.Config{ServerName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	if got := st.PeerCertificates[0].SerialNumber.Int64(); got != 7 {
		t.Errorf("serial %d, want 7", got)
	}
}
