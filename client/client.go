// Package client decides interLink pods with sar-bridge's Data API
// (POST /v1/data/interlink/authz/decision): the integration point for an in-process hook
// in interLink's CreateHandler. It depends only on the standard library and the
// Kubernetes core types.
//
// Fail closed: treat every error as a refusal. Deny is not an error (Decision.Allowed is
// false); an unreachable bridge is an *UnavailableError; an answer the client cannot use
// is a *ResponseError.
package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/sar-bridge/sar-bridge/decisionapi"
)

// DefaultPath is the bridge's decision document.
const DefaultPath = decisionapi.DataAPIPath

// maxResponseBytes bounds an answer: a decision is a few KiB.
const maxResponseBytes = 1 << 20

// Options configures a Client.
type Options struct {
	// URL is the bridge's base URL, e.g. https://sar-bridge.sar-bridge.svc:8080.
	URL string
	// Path is the decision document's path (default DefaultPath).
	Path string
	// Timeout bounds one decision, connection included (default 5s).
	Timeout time.Duration
	// TokenFile holds the bearer token sent to the bridge (e.g. a projected service
	// account token); it is read again whenever it changes on disk. Empty: no token.
	TokenFile string
	// CAFile is the PEM bundle the bridge's certificate is verified with; empty: the
	// system's roots.
	CAFile string
	// Transport replaces the HTTP transport (tests, proxies); CAFile is then ignored.
	Transport http.RoundTripper
}

// Input is one decision's input.
type Input struct {
	// Operation is create, delete or status.
	Operation string
	Pod       *corev1.Pod
	// User is the requesting user, sent as input.user: the bridge honours it only when
	// the caller may impersonate it. Nil: the pod's service account.
	User *User
	// Node is the target virtual node; empty: the pod's spec.nodeName.
	Node string
}

// User is an identity asserted by a trusted caller.
type User = decisionapi.User

// Decision is the bridge's answer.
type Decision struct {
	Allowed       bool
	Reason        string
	Modifications Modifications
	// ID is the decision id of the bridge's decision log.
	ID string
}

// Modifications are what an allowing decision asks the caller to change in the pod:
// merge PodAnnotations (their values win), set ResourceLimits on the named containers
// that set no limits, and set RunAsUser as spec.securityContext.runAsUser when the pod
// sets none (never overwrite one the pod has: refuse the pod instead).
type Modifications = decisionapi.Modifications

// UnavailableError means no decision could be had: the bridge was unreachable, timed
// out, or could not reach the Kubernetes API (503). Retrying later may succeed.
type UnavailableError struct {
	// StatusCode is the bridge's status, or 0 when it was not reached.
	StatusCode int
	Err        error
}

func (e *UnavailableError) Error() string {
	if e.StatusCode != 0 {
		return fmt.Sprintf("sar-bridge unavailable: HTTP %d: %v", e.StatusCode, e.Err)
	}
	return fmt.Sprintf("sar-bridge unavailable: %v", e.Err)
}

func (e *UnavailableError) Unwrap() error { return e.Err }

// ResponseError is an answer that is not a decision: the request was refused (400, 401,
// 403, …) or the answer had an unexpected shape. Retrying the same request will not help.
type ResponseError struct {
	StatusCode int
	// Code and Message are OPA's error fields, when the bridge sent them.
	Code    string
	Message string
}

func (e *ResponseError) Error() string {
	if e.Code != "" {
		return fmt.Sprintf("sar-bridge: HTTP %d %s: %s", e.StatusCode, e.Code, e.Message)
	}
	return fmt.Sprintf("sar-bridge: HTTP %d: %s", e.StatusCode, e.Message)
}

// Client asks sar-bridge for decisions. It is safe for concurrent use.
type Client struct {
	endpoint string
	http     *http.Client
	token    *tokenFile
}

// New returns a Client.
func New(opts Options) (*Client, error) {
	base, err := url.Parse(opts.URL)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("client: URL %q: want http(s)://host:port", opts.URL)
	}
	p := opts.Path
	if p == "" {
		p = DefaultPath
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	transport := opts.Transport
	if transport == nil {
		if transport, err = newTransport(opts.CAFile); err != nil {
			return nil, err
		}
	}
	c := &Client{
		endpoint: strings.TrimRight(base.String(), "/") + "/" + strings.TrimLeft(p, "/"),
		http:     &http.Client{Transport: transport, Timeout: timeout},
	}
	if opts.TokenFile != "" {
		c.token = &tokenFile{path: opts.TokenFile}
		if _, err := c.token.get(); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func newTransport(caFile string) (http.RoundTripper, error) {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile == "" {
		return t, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("client: CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("client: CA file %s holds no PEM certificate", caFile)
	}
	t.TLSClientConfig.RootCAs = pool
	return t, nil
}

// Decide asks the bridge about in. An error means no decision: refuse the pod.
func (c *Client) Decide(ctx context.Context, in Input) (Decision, error) {
	if in.Pod == nil {
		return Decision{}, errors.New("client: Input.Pod is required")
	}
	body, err := json.Marshal(struct {
		Input decisionapi.Input `json:"input"`
	}{decisionapi.Input{Operation: in.Operation, Pod: in.Pod, User: in.User, Node: decisionapi.OnNode(in.Node)}})
	if err != nil {
		return Decision{}, fmt.Errorf("client: encoding the input: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoint, bytes.NewReader(body))
	if err != nil {
		return Decision{}, fmt.Errorf("client: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if c.token != nil {
		token, err := c.token.get()
		if err != nil {
			return Decision{}, err
		}
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := c.http.Do(req)
	if err != nil {
		return Decision{}, &UnavailableError{Err: err}
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, maxResponseBytes+1))
	if err != nil {
		return Decision{}, &UnavailableError{StatusCode: res.StatusCode, Err: fmt.Errorf("reading the answer: %w", err)}
	}
	if len(data) > maxResponseBytes {
		return Decision{}, &ResponseError{StatusCode: res.StatusCode, Message: "answer larger than 1 MiB"}
	}
	return parseAnswer(res.StatusCode, data)
}

// parseAnswer reads a decision, or the error the bridge answered.
func parseAnswer(status int, data []byte) (Decision, error) {
	if status != http.StatusOK {
		var opaErr struct{ Code, Message string }
		if json.Unmarshal(data, &opaErr) != nil || opaErr.Message == "" {
			opaErr.Message = strings.TrimSpace(string(data))
		}
		if status == http.StatusServiceUnavailable || status == http.StatusBadGateway || status == http.StatusGatewayTimeout {
			return Decision{}, &UnavailableError{StatusCode: status, Err: errors.New(opaErr.Message)}
		}
		return Decision{}, &ResponseError{StatusCode: status, Code: opaErr.Code, Message: opaErr.Message}
	}
	var answer struct {
		Result     any    `json:"result"`
		DecisionID string `json:"decision_id"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&answer); err != nil {
		return Decision{}, &ResponseError{StatusCode: status, Message: fmt.Sprintf("answer is not a decision: %v", err)}
	}
	if answer.Result == nil {
		return Decision{}, &ResponseError{StatusCode: status, Message: "answer has no result.allowed: is the document path right?"}
	}
	v, err := decisionapi.ReadVerdict(answer.Result)
	if err != nil {
		return Decision{}, &ResponseError{StatusCode: status, Message: fmt.Sprintf("answer is not a decision: %v", err)}
	}
	return Decision{Allowed: v.Allowed, Reason: v.Reason, Modifications: v.Modifications, ID: answer.DecisionID}, nil
}

// tokenFile is a bearer token on disk, read again when the file changes (kubelet
// rotates projected tokens by swapping a symlink, which changes what Stat sees).
type tokenFile struct {
	path string

	mu      sync.Mutex
	token   string
	modTime time.Time
	size    int64
}

func (t *tokenFile) get() (string, error) {
	fi, err := os.Stat(t.path)
	if err != nil {
		return "", fmt.Errorf("client: token file: %w", err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.token != "" && fi.ModTime().Equal(t.modTime) && fi.Size() == t.size {
		return t.token, nil
	}
	raw, err := os.ReadFile(t.path)
	if err != nil {
		return "", fmt.Errorf("client: token file: %w", err)
	}
	token := strings.TrimSpace(string(raw))
	if token == "" {
		return "", fmt.Errorf("client: token file %s is empty", t.path)
	}
	t.token, t.modTime, t.size = token, fi.ModTime(), fi.Size()
	return token, nil
}
