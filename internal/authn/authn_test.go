package authn

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/endpoints/request"
	k8stesting "k8s.io/client-go/testing"
)

const dataPath = "/v1/data/sar/allow"

// env is one Filter in front of a recording handler, backed by a fake API
// whose TokenReview/SAR reactors can be switched to fail.
type env struct {
	t      *testing.T
	api    *fakeAPI
	filter *Filter
	h      http.Handler

	mu       sync.Mutex
	tokenErr error // returned by the TokenReview reactor when set
	sarErr   error // returned by the SAR reactor when set
	seen     []seenRequest
}

type seenRequest struct {
	user          string
	groups        []string
	authorization string
}

// tokens known to the fake TokenReview.
var tokenUsers = map[string]authenticationv1.UserInfo{
	"alice-token": {Username: "alice", UID: "u-alice", Groups: []string{"devs"}},
	"bob-token":   {Username: "bob", Groups: []string{"guests"}},
}

// allowedUsers may create under /v1/data/ in the fake SAR.
var allowedUsers = map[string]bool{"alice": true, "carol": true}

func newEnv(t *testing.T, opts Options) *env {
	t.Helper()
	e := &env{t: t}
	api, client := newFakeAPI(t)
	e.api = api
	api.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		e.mu.Lock()
		err := e.tokenErr
		e.mu.Unlock()
		if err != nil {
			return true, nil, err
		}
		in := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview)
		out := in.DeepCopy()
		switch tok := in.Spec.Token; {
		case tok == "status-error":
			out.Status = authenticationv1.TokenReviewStatus{Error: "token lookup failed"}
		case tok == "wrong-audience":
			out.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: tokenUsers["alice-token"], Audiences: []string{"someone-else"}}
		default:
			if u, ok := tokenUsers[tok]; ok {
				// Like the API server: echo the audiences the token is valid for.
				out.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: u, Audiences: in.Spec.Audiences}
			}
		}
		return true, out, nil
	})
	api.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		e.mu.Lock()
		err := e.sarErr
		e.mu.Unlock()
		if err != nil {
			return true, nil, err
		}
		in := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		out := in.DeepCopy()
		na := in.Spec.NonResourceAttributes
		if in.Spec.ResourceAttributes == nil && na != nil && na.Verb == "create" &&
			strings.HasPrefix(na.Path, "/v1/data/") && allowedUsers[in.Spec.User] {
			out.Status = authorizationv1.SubjectAccessReviewStatus{Allowed: true, Reason: "test allows"}
		} else {
			out.Status = authorizationv1.SubjectAccessReviewStatus{Reason: "no rule"}
		}
		return true, out, nil
	})

	opts.Client = client
	f, err := New(t.Context(), opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	e.filter = f
	e.h = f.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, ok := request.UserFrom(r.Context())
		if !ok {
			t.Errorf("next called without a user in the context")
			http.Error(w, "no user", http.StatusInternalServerError)
			return
		}
		e.mu.Lock()
		e.seen = append(e.seen, seenRequest{user: u.GetName(), groups: u.GetGroups(), authorization: r.Header.Get("Authorization")})
		e.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"result":true}`))
	}))
	return e
}

func (e *env) setErrs(tokenErr, sarErr error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.tokenErr, e.sarErr = tokenErr, sarErr
}

func (e *env) nextCalls() []seenRequest {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.seen)
}

func (e *env) do(p, authorization string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, p, strings.NewReader(`{"input":{}}`))
	if authorization != "" {
		r.Header.Set("Authorization", authorization)
	}
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, r)
	return w
}

func decodeError(t *testing.T, body []byte) errorBody {
	t.Helper()
	var eb errorBody
	if err := json.Unmarshal(body, &eb); err != nil {
		t.Fatalf("error body %q is not JSON: %v", body, err)
	}
	return eb
}

func TestTokenMode(t *testing.T) {
	for _, tc := range []struct {
		name          string
		path          string
		authorization string
		tokenErr      error
		sarErr        error
		wantStatus    int
		wantCode      string
		wantMsg       string
		wantTR        int // TokenReviews expected; -1 = at least one
		wantSAR       int // SARs expected; -1 = at least one
	}{
		{name: "no token", authorization: "", wantStatus: 401, wantCode: "unauthorized", wantMsg: "missing bearer token"},
		{name: "other scheme", authorization: "Basic YTpi", wantStatus: 401, wantCode: "unauthorized", wantMsg: "missing bearer token"},
		{name: "empty bearer", authorization: "Bearer ", wantStatus: 401, wantCode: "unauthorized", wantMsg: "missing bearer token"},
		{name: "invalid token", authorization: "Bearer nope", wantStatus: 401, wantCode: "unauthorized", wantMsg: "invalid bearer token", wantTR: 1},
		{name: "token review status error is a rejection", authorization: "Bearer status-error", wantStatus: 401, wantCode: "unauthorized", wantMsg: "invalid bearer token", wantTR: 1},
		{name: "token for another audience", authorization: "Bearer wrong-audience", wantStatus: 401, wantCode: "unauthorized", wantMsg: "invalid bearer token", wantTR: 1},
		{name: "sar denies", authorization: "Bearer bob-token", wantStatus: 403, wantCode: "unauthorized",
			wantMsg: `caller "bob" may not create /v1/data/sar/allow`, wantTR: 1, wantSAR: 1},
		{name: "allowed", authorization: "Bearer alice-token", wantStatus: 200, wantTR: 1, wantSAR: 1},
		{name: "lower-case scheme allowed", authorization: "bearer alice-token", wantStatus: 200, wantTR: 1, wantSAR: 1},
		{name: "non-canonical path", path: "/v1/data/../admin", authorization: "Bearer alice-token", wantStatus: 403, wantCode: "unauthorized",
			wantMsg: `caller "alice" may not create /v1/data/../admin: path is not canonical`, wantTR: 1},
		{name: "token review internal error", authorization: "Bearer alice-token", tokenErr: apierrors.NewInternalError(errTransport),
			wantStatus: 503, wantCode: "internal_error", wantMsg: "caller authentication is unavailable", wantTR: -1},
		{name: "token review unavailable", authorization: "Bearer alice-token", tokenErr: apierrors.NewServiceUnavailable("down"),
			wantStatus: 503, wantCode: "internal_error", wantTR: 1},
		{name: "api server unreachable", authorization: "Bearer alice-token", tokenErr: errTransport,
			wantStatus: 503, wantCode: "internal_error", wantTR: -1},
		{name: "token review forbidden for sar-bridge", authorization: "Bearer alice-token",
			tokenErr:   apierrors.NewForbidden(authenticationv1.Resource("tokenreviews"), "", errTransport),
			wantStatus: 503, wantCode: "internal_error", wantTR: 1},
		{name: "sar unavailable", authorization: "Bearer alice-token", sarErr: apierrors.NewServiceUnavailable("down"),
			wantStatus: 503, wantCode: "internal_error", wantMsg: "caller authorization is unavailable", wantTR: 1, wantSAR: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, Options{Mode: ModeToken, Audiences: []string{"sar-bridge"}})
			e.setErrs(tc.tokenErr, tc.sarErr)
			p := tc.path
			if p == "" {
				p = dataPath
			}
			w := e.do(p, tc.authorization)

			if w.Code != tc.wantStatus {
				t.Fatalf("status = %d, want %d; body %s", w.Code, tc.wantStatus, w.Body)
			}
			checkCount(t, "tokenreviews", e.api.count("tokenreviews"), tc.wantTR)
			checkCount(t, "subjectaccessreviews", e.api.count("subjectaccessreviews"), tc.wantSAR)

			if tc.wantStatus != 200 {
				if n := len(e.nextCalls()); n != 0 {
					t.Errorf("next called %d times on a %d", n, w.Code)
				}
				if ct := w.Header().Get("Content-Type"); ct != "application/json" {
					t.Errorf("Content-Type = %q", ct)
				}
				eb := decodeError(t, w.Body.Bytes())
				if eb.Code != tc.wantCode {
					t.Errorf("code = %q, want %q", eb.Code, tc.wantCode)
				}
				if tc.wantMsg != "" && eb.Message != tc.wantMsg {
					t.Errorf("message = %q, want %q", eb.Message, tc.wantMsg)
				}
				wantAuth := ""
				if tc.wantStatus == 401 {
					wantAuth = "Bearer"
				}
				if got := w.Header().Get("WWW-Authenticate"); got != wantAuth {
					t.Errorf("WWW-Authenticate = %q, want %q", got, wantAuth)
				}
				return
			}

			seen := e.nextCalls()
			if len(seen) != 1 {
				t.Fatalf("next called %d times, want 1", len(seen))
			}
			if seen[0].user != "alice" || !slices.Equal(seen[0].groups, []string{"devs", "system:authenticated"}) {
				t.Errorf("next saw user %q groups %v", seen[0].user, seen[0].groups)
			}
			if seen[0].authorization != "" {
				t.Errorf("Authorization header reached next: %q", seen[0].authorization)
			}
			tr := e.api.lastTokenReview()
			if tr.Spec.Token != "alice-token" || !slices.Equal(tr.Spec.Audiences, []string{"sar-bridge"}) {
				t.Errorf("TokenReview spec = %+v, want token alice-token, audiences [sar-bridge]", tr.Spec)
			}
			sar := e.api.lastSAR()
			if sar.Spec.ResourceAttributes != nil {
				t.Errorf("SAR has resourceAttributes %+v", sar.Spec.ResourceAttributes)
			}
			if na := sar.Spec.NonResourceAttributes; na == nil || na.Path != dataPath || na.Verb != "create" {
				t.Errorf("SAR nonResourceAttributes = %+v, want path %s verb create", na, dataPath)
			}
			if sar.Spec.User != "alice" || sar.Spec.UID != "u-alice" || !slices.Equal(sar.Spec.Groups, []string{"devs", "system:authenticated"}) {
				t.Errorf("SAR subject = %q/%q %v", sar.Spec.User, sar.Spec.UID, sar.Spec.Groups)
			}
		})
	}
}

func sameSet(a, b []string) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}

func checkCount(t *testing.T, what string, got, want int) {
	t.Helper()
	if (want < 0 && got < 1) || (want >= 0 && got != want) {
		t.Errorf("%s calls = %d, want %d (-1 = at least one)", what, got, want)
	}
}

func TestTokenModeNoAudiences(t *testing.T) {
	e := newEnv(t, Options{Mode: ModeToken})
	if w := e.do(dataPath, "Bearer alice-token"); w.Code != 200 {
		t.Fatalf("status = %d; body %s", w.Code, w.Body)
	}
	if auds := e.api.lastTokenReview().Spec.Audiences; len(auds) != 0 {
		t.Errorf("TokenReview audiences = %v, want none (API server default)", auds)
	}
}

func TestCaching(t *testing.T) {
	t.Run("allowed is cached", func(t *testing.T) {
		e := newEnv(t, Options{Mode: ModeToken})
		for i := range 3 {
			if w := e.do(dataPath, "Bearer alice-token"); w.Code != 200 {
				t.Fatalf("request %d: status %d", i, w.Code)
			}
		}
		checkCount(t, "tokenreviews", e.api.count("tokenreviews"), 1)
		checkCount(t, "subjectaccessreviews", e.api.count("subjectaccessreviews"), 1)
		// A different path is a different SAR, the token stays cached.
		if w := e.do("/v1/data/other", "Bearer alice-token"); w.Code != 200 {
			t.Fatalf("other path: status %d", w.Code)
		}
		checkCount(t, "tokenreviews", e.api.count("tokenreviews"), 1)
		checkCount(t, "subjectaccessreviews", e.api.count("subjectaccessreviews"), 2)
	})
	t.Run("denied is cached", func(t *testing.T) {
		e := newEnv(t, Options{Mode: ModeToken})
		for range 2 {
			if w := e.do(dataPath, "Bearer bob-token"); w.Code != 403 {
				t.Fatalf("status %d", w.Code)
			}
		}
		checkCount(t, "subjectaccessreviews", e.api.count("subjectaccessreviews"), 1)
	})
	t.Run("ttl expiry", func(t *testing.T) {
		e := newEnv(t, Options{Mode: ModeToken, SuccessTTL: 50 * time.Millisecond, FailureTTL: 50 * time.Millisecond})
		e.do(dataPath, "Bearer alice-token")
		time.Sleep(150 * time.Millisecond)
		e.do(dataPath, "Bearer alice-token")
		checkCount(t, "tokenreviews", e.api.count("tokenreviews"), 2)
		checkCount(t, "subjectaccessreviews", e.api.count("subjectaccessreviews"), 2)
	})
	t.Run("token review errors are not cached", func(t *testing.T) {
		e := newEnv(t, Options{Mode: ModeToken})
		e.setErrs(apierrors.NewServiceUnavailable("down"), nil)
		if w := e.do(dataPath, "Bearer alice-token"); w.Code != 503 {
			t.Fatalf("while down: status %d", w.Code)
		}
		before := e.api.count("tokenreviews")
		e.setErrs(nil, nil)
		if w := e.do(dataPath, "Bearer alice-token"); w.Code != 200 {
			t.Fatalf("after recovery: status %d; body %s", w.Code, w.Body)
		}
		if after := e.api.count("tokenreviews"); after != before+1 {
			t.Errorf("tokenreviews %d -> %d, want a fresh review after an error", before, after)
		}
	})
	t.Run("sar errors are not cached", func(t *testing.T) {
		e := newEnv(t, Options{Mode: ModeToken})
		e.setErrs(nil, apierrors.NewServiceUnavailable("down"))
		if w := e.do(dataPath, "Bearer alice-token"); w.Code != 503 {
			t.Fatalf("while down: status %d", w.Code)
		}
		e.setErrs(nil, nil)
		if w := e.do(dataPath, "Bearer alice-token"); w.Code != 200 {
			t.Fatalf("after recovery: status %d; body %s", w.Code, w.Body)
		}
		checkCount(t, "tokenreviews", e.api.count("tokenreviews"), 1)
		checkCount(t, "subjectaccessreviews", e.api.count("subjectaccessreviews"), 2)
	})
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := newEnv(t, Options{Mode: ModeToken, Registerer: reg})
	e.do(dataPath, "Bearer alice-token")
	e.do(dataPath, "")
	e.do(dataPath, "Bearer bob-token")
	e.setErrs(apierrors.NewServiceUnavailable("down"), nil)
	e.do(dataPath, "Bearer other")

	// A second Filter on the same registry shares the counter.
	e2 := newEnv(t, Options{Mode: ModeToken, Registerer: reg})
	e2.do(dataPath, "Bearer alice-token")

	for result, want := range map[string]float64{"ok": 2, "unauthenticated": 1, "forbidden": 1, "error": 1} {
		if got := testutil.ToFloat64(e.filter.total.WithLabelValues("token", result)); got != want {
			t.Errorf("result=%s: %v, want %v", result, got, want)
		}
	}
}

func TestNoneMode(t *testing.T) {
	f, err := New(t.Context(), Options{Mode: ModeNone})
	if err != nil {
		t.Fatal(err)
	}
	next := &struct{ http.Handler }{http.NotFoundHandler()}
	if got := f.Wrap(next); got != http.Handler(next) {
		t.Errorf("none mode wrapped the handler")
	}
	if f.ClientCAs() != nil {
		t.Errorf("none mode has client CAs")
	}
}

func TestUnconfiguredFilterFailsClosed(t *testing.T) {
	for name, f := range map[string]*Filter{"nil": nil, "zero": {}} {
		w := httptest.NewRecorder()
		f.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
			t.Errorf("%s Filter called next", name)
		})).ServeHTTP(w, httptest.NewRequest(http.MethodPost, dataPath, nil))
		if w.Code != 503 {
			t.Errorf("%s Filter: status %d, want 503", name, w.Code)
		}
	}
}

func TestNewErrors(t *testing.T) {
	_, client := newFakeAPI(t)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, newTestCA(t, "ca").certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"unknown mode", Options{Mode: "basic", Client: client}, "unknown authn mode"},
		{"empty mode", Options{Client: client}, "unknown authn mode"},
		{"token without client", Options{Mode: ModeToken}, "needs a Kubernetes client"},
		{"mtls without CA file", Options{Mode: ModeMTLS, Client: client}, "needs a client CA file"},
		{"mtls with missing CA file", Options{Mode: ModeMTLS, Client: client, ClientCAFile: filepath.Join(t.TempDir(), "nope.pem")}, "loading client CA file"},
		{"CA file in token mode", Options{Mode: ModeToken, Client: client, ClientCAFile: caFile}, "only used in \"mtls\" mode"},
		{"audiences in mtls mode", Options{Mode: ModeMTLS, Client: client, ClientCAFile: caFile, Audiences: []string{"x"}}, "only used in \"token\" mode"},
		{"negative ttl", Options{Mode: ModeToken, Client: client, SuccessTTL: -time.Second}, "must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(t.Context(), tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// testCA is a throwaway certificate authority.
type testCA struct {
	cert    *x509.Certificate
	key     crypto.Signer
	certPEM []byte
}

var serial = big.NewInt(100)
var serialMu sync.Mutex

func nextSerial() *big.Int {
	serialMu.Lock()
	defer serialMu.Unlock()
	serial = new(big.Int).Add(serial, big.NewInt(1))
	return serial
}

func newTestCA(t *testing.T, cn string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          nextSerial(),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// clientCert issues a client-auth certificate with CN and O set.
func (ca *testCA) clientCert(t *testing.T, cn string, orgs ...string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: nextSerial(),
		Subject:      pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
}

// tlsServer serves h over TLS, requesting but not verifying client
// certificates so that the Filter, not the handshake, is what rejects them.
func tlsServer(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = &tls.Config{ClientAuth: tls.RequestClientCert}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

func post(t *testing.T, srv *httptest.Server, authorization string, certs ...tls.Certificate) (*http.Response, []byte) {
	t.Helper()
	tr := srv.Client().Transport.(*http.Transport).Clone()
	tr.TLSClientConfig.Certificates = certs
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+dataPath, strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatalf("request: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

func TestMTLSMode(t *testing.T) {
	ca := newTestCA(t, "callers-ca")
	otherCA := newTestCA(t, "other-ca")
	caFile := filepath.Join(t.TempDir(), "client-ca.pem")
	if err := os.WriteFile(caFile, ca.certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, Options{Mode: ModeMTLS, ClientCAFile: caFile})
	srv := tlsServer(t, e.h)

	for _, tc := range []struct {
		name          string
		certs         []tls.Certificate
		authorization string
		wantStatus    int
		wantMsg       string
		wantUser      string
		wantGroups    []string
	}{
		{name: "cert signed by CA", certs: []tls.Certificate{ca.clientCert(t, "carol", "admins", "devs")},
			wantStatus: 200, wantUser: "carol", wantGroups: []string{"admins", "devs", "system:authenticated"}},
		{name: "bearer token is ignored", certs: []tls.Certificate{ca.clientCert(t, "carol")}, authorization: "Bearer alice-token",
			wantStatus: 200, wantUser: "carol", wantGroups: []string{"system:authenticated"}},
		{name: "cert signed by CA, sar denies", certs: []tls.Certificate{ca.clientCert(t, "dave", "devs")},
			wantStatus: 403, wantMsg: `caller "dave" may not create /v1/data/sar/allow`},
		{name: "cert from another CA", certs: []tls.Certificate{otherCA.clientCert(t, "carol", "admins")},
			wantStatus: 401, wantMsg: "client certificate not accepted"},
		{name: "no cert", wantStatus: 401, wantMsg: "missing client certificate"},
		{name: "no cert, valid bearer token", authorization: "Bearer alice-token", wantStatus: 401, wantMsg: "missing client certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.api.ClearActions()
			e.mu.Lock()
			e.seen = nil
			e.mu.Unlock()

			resp, body := post(t, srv, tc.authorization, tc.certs...)
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status = %d, want %d; body %s", resp.StatusCode, tc.wantStatus, body)
			}
			if n := e.api.count("tokenreviews"); n != 0 {
				t.Errorf("mtls mode made %d TokenReviews", n)
			}
			if tc.wantStatus != 200 {
				eb := decodeError(t, body)
				if eb.Code != "unauthorized" || eb.Message != tc.wantMsg {
					t.Errorf("error = %+v, want unauthorized %q", eb, tc.wantMsg)
				}
				if h := resp.Header.Get("WWW-Authenticate"); h != "" {
					t.Errorf("WWW-Authenticate = %q in mtls mode", h)
				}
				return
			}
			seen := e.nextCalls()
			// DER sorts the O entries (a SET), so compare groups as sets.
			if len(seen) != 1 || seen[0].user != tc.wantUser || !sameSet(seen[0].groups, tc.wantGroups) || seen[0].authorization != "" {
				t.Fatalf("next saw %+v, want user %q groups %v and no Authorization", seen, tc.wantUser, tc.wantGroups)
			}
			sar := e.api.lastSAR()
			if sar == nil || sar.Spec.User != tc.wantUser || !sameSet(sar.Spec.Groups, tc.wantGroups) ||
				sar.Spec.NonResourceAttributes == nil || sar.Spec.NonResourceAttributes.Path != dataPath {
				t.Errorf("SAR = %+v", sar)
			}
		})
	}

	t.Run("ClientCAs follows the CA file", func(t *testing.T) {
		pool := e.filter.ClientCAs()
		if pool == nil {
			t.Fatal("ClientCAs is nil in mtls mode")
		}
		verify := func(c tls.Certificate) error {
			_, err := c.Leaf.Verify(x509.VerifyOptions{Roots: pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
			return err
		}
		if err := verify(ca.clientCert(t, "carol")); err != nil {
			t.Errorf("cert from the CA does not verify: %v", err)
		}
		newcomer := otherCA.clientCert(t, "carol")
		if verify(newcomer) == nil {
			t.Errorf("cert from another CA verifies")
		}
		// Rotate the bundle to the other CA: its certs become valid for both
		// the TLS pool and the authenticator, without a restart.
		if err := os.WriteFile(caFile, otherCA.certPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(20 * time.Second)
		for verify(newcomer) != nil {
			if time.Now().After(deadline) {
				t.Fatal("CA file change not picked up")
			}
			time.Sleep(50 * time.Millisecond)
		}
		if resp, body := post(t, srv, "", newcomer); resp.StatusCode != 200 {
			t.Errorf("after CA rotation: status %d; body %s", resp.StatusCode, body)
		}
	})
}

// In token mode a client certificate, even one a CA would accept, is no
// credential.
func TestTokenModeIgnoresClientCerts(t *testing.T) {
	ca := newTestCA(t, "callers-ca")
	e := newEnv(t, Options{Mode: ModeToken})
	srv := tlsServer(t, e.h)
	resp, body := post(t, srv, "", ca.clientCert(t, "carol", "admins"))
	if resp.StatusCode != 401 || resp.Header.Get("WWW-Authenticate") != "Bearer" {
		t.Errorf("status = %d, WWW-Authenticate %q; body %s", resp.StatusCode, resp.Header.Get("WWW-Authenticate"), body)
	}
	if e.filter.ClientCAs() != nil {
		t.Errorf("token mode has client CAs")
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080":           true,
		"127.1.2.3:8080":           true,
		"[::1]:8080":               true,
		"localhost:8080":           true,
		"LOCALHOST:8080":           true,
		"localhost.:8080":          true,
		"[::ffff:127.0.0.1]:8080":  true,
		"127.0.0.1":                true,
		"::1":                      true,
		"[::1]":                    true,
		"localhost":                true,
		":8080":                    false,
		"":                         false,
		"0.0.0.0:8080":             false,
		"[::]:8080":                false,
		"10.0.0.1:8080":            false,
		"192.168.1.1:80":           false,
		"[fe80::1%eth0]:8080":      false,
		"example.com:8080":         false,
		"localhost.example.com:80": false,
		"128.0.0.1:8080":           false,
	} {
		if got := IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

func TestIsCleanPath(t *testing.T) {
	for p, want := range map[string]bool{
		"/v1/data":          true,
		"/v1/data/":         true,
		"/v1/data/a/b":      true,
		"/":                 true,
		"/v1/data/../admin": false,
		"/v1/data/./x":      false,
		"/v1//data":         false,
		"/v1/data/..":       false,
		"":                  false,
		"v1/data":           false,
	} {
		if got := isCleanPath(p); got != want {
			t.Errorf("isCleanPath(%q) = %v, want %v", p, got, want)
		}
	}
}
