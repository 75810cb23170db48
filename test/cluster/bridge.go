package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sar-bridge/sar-bridge/decisionapi"
)

// DecisionPath is the OPA-compatible decision endpoint.
const DecisionPath = decisionapi.DataAPIPath

// BridgeOptions configures StartBridge.
type BridgeOptions struct {
	Binary     string
	Kubeconfig string
	// Args are extra flags (--web.listen and --web.internal.listen are chosen here,
	// --kubeconfig comes from Kubeconfig).
	Args []string
	// LogPath receives the bridge's stdout and stderr.
	LogPath string
	// ReadyTimeout bounds the wait for /ready (default 60s).
	ReadyTimeout time.Duration
	// Env is added to the test's environment (e.g. GOMEMLIMIT, as the manifests set it).
	Env []string
}

// Bridge is a running sar-bridge subprocess.
type Bridge struct {
	URL         string // public listener, http://127.0.0.1:PORT
	InternalURL string // internal listener
	LogPath     string
	Args        []string

	cmd     *exec.Cmd
	logFile *os.File
	done    chan struct{}
	waitErr error
	once    sync.Once
	client  *http.Client
}

// handedOut holds the ports FreePort returned: the kernel may give a port closed a
// moment ago to the next caller, and two listeners of one bridge (--web.listen and
// --interlink.listen, both picked before it starts) then got the same port (CI: "bind:
// address already in use").
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// FreePort returns a currently unused loopback TCP port, never one it returned before in
// this process.
func FreePort() (int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return port, nil
		}
	}
	return 0, errors.New("no loopback port that was not handed out before")
}

// StartBridge starts the binary on free loopback ports and waits for /ready.
// On error the returned Bridge (if non-nil) is already stopped; its log is kept.
func StartBridge(opts BridgeOptions) (*Bridge, error) {
	pub, err := FreePort()
	if err != nil {
		return nil, err
	}
	internal, err := FreePort()
	if err != nil {
		return nil, err
	}
	for internal == pub {
		if internal, err = FreePort(); err != nil {
			return nil, err
		}
	}
	args := []string{
		"--kubeconfig=" + opts.Kubeconfig,
		fmt.Sprintf("--web.listen=127.0.0.1:%d", pub),
		fmt.Sprintf("--web.internal.listen=127.0.0.1:%d", internal),
	}
	args = append(args, opts.Args...)
	if opts.LogPath == "" {
		return nil, errors.New("BridgeOptions.LogPath is required")
	}
	if err := os.MkdirAll(filepath.Dir(opts.LogPath), 0o755); err != nil {
		return nil, err
	}
	lf, err := os.Create(opts.LogPath)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(lf, "# %s %s\n", opts.Binary, strings.Join(args, " "))
	cmd := exec.Command(opts.Binary, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	if len(opts.Env) > 0 {
		cmd.Env = append(os.Environ(), opts.Env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	b := &Bridge{
		URL:         fmt.Sprintf("http://127.0.0.1:%d", pub),
		InternalURL: fmt.Sprintf("http://127.0.0.1:%d", internal),
		LogPath:     opts.LogPath,
		Args:        args,
		cmd:         cmd,
		logFile:     lf,
		done:        make(chan struct{}),
		client:      &http.Client{Timeout: 30 * time.Second},
	}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("starting %s: %w", opts.Binary, err)
	}
	go func() {
		b.waitErr = cmd.Wait()
		close(b.done)
	}()
	timeout := opts.ReadyTimeout
	if timeout == 0 {
		timeout = 60 * time.Second
	}
	if err := b.WaitReady(timeout); err != nil {
		b.Stop()
		return b, err
	}
	return b, nil
}

// PID is the process's id.
func (b *Bridge) PID() int { return b.cmd.Process.Pid }

// Exited reports whether the process has exited.
func (b *Bridge) Exited() bool {
	select {
	case <-b.done:
		return true
	default:
		return false
	}
}

// WaitReady polls the internal /ready endpoint until it answers 200.
func (b *Bridge) WaitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last := "no answer"
	for {
		select {
		case <-b.done:
			return fmt.Errorf("sar-bridge exited before it was ready: %v (log %s)", b.waitErr, b.LogPath)
		default:
		}
		code, body, err := b.Get(b.InternalURL + "/ready")
		if err == nil && code == http.StatusOK {
			return nil
		}
		if err != nil {
			last = err.Error()
		} else {
			last = fmt.Sprintf("%d %s", code, strings.TrimSpace(string(body)))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sar-bridge not ready within %s: last /ready: %s (log %s)", timeout, last, b.LogPath)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Stop terminates the process (SIGTERM, then SIGKILL after 10s) and closes the log.
func (b *Bridge) Stop() {
	b.once.Do(func() {
		if b.cmd.Process != nil && !b.Exited() {
			_ = b.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-b.done:
			case <-time.After(10 * time.Second):
				_ = b.cmd.Process.Kill()
				<-b.done
			}
		}
		_ = b.logFile.Close()
	})
}

// Log returns the captured output.
func (b *Bridge) Log() string {
	data, err := os.ReadFile(b.LogPath)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", b.LogPath, err)
	}
	return string(data)
}

// Get performs a GET and returns the status and body.
func (b *Bridge) Get(url string) (int, []byte, error) {
	return b.Do(http.MethodGet, url, "", nil)
}

// Do performs a request and returns the status and body.
func (b *Bridge) Do(method, url, contentType string, body []byte) (int, []byte, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, url, r)
	if err != nil {
		return 0, nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	res, err := b.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	return res.StatusCode, data, err
}

// Review mirrors result.review in a decision.
type Review struct {
	Allowed    bool            `json:"allowed"`
	Denied     bool            `json:"denied"`
	Reason     string          `json:"reason"`
	Attributes json.RawMessage `json:"attributes"`
}

// Result mirrors the decision's result object.
type Result struct {
	Allowed       *bool          `json:"allowed"`
	Reason        string         `json:"reason"`
	Modifications map[string]any `json:"modifications"`
	Review        *Review        `json:"review"`
}

// OPAError is OPA's error shape.
type OPAError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Response is the parsed answer of a decision request.
type Response struct {
	Status     int
	Body       []byte
	Result     *Result
	DecisionID string
	Error      OPAError
	Elapsed    time.Duration
	// ParseError is set when the body is not the JSON shape expected.
	ParseError error
}

// Allowed reports result.allowed (false when absent).
func (r *Response) Allowed() bool {
	return r.Result != nil && r.Result.Allowed != nil && *r.Result.Allowed
}

// Reason reports result.reason.
func (r *Response) Reason() string {
	if r.Result == nil {
		return ""
	}
	return r.Result.Reason
}

func (r *Response) String() string {
	return fmt.Sprintf("HTTP %d %s", r.Status, strings.TrimSpace(string(r.Body)))
}

// Post sends a raw body to the decision endpoint.
func (b *Bridge) Post(contentType string, body []byte) (*Response, error) {
	return b.Send(http.MethodPost, contentType, body)
}

// Send sends a raw request to the decision endpoint and parses what it can.
func (b *Bridge) Send(method, contentType string, body []byte) (*Response, error) {
	start := time.Now()
	code, data, err := b.Do(method, b.URL+DecisionPath, contentType, body)
	if err != nil {
		return nil, err
	}
	return parseResponse(code, data, time.Since(start)), nil
}

// parseResponse reads a decision answer or OPA error from a response body, keeping
// whatever does not parse in ParseError.
func parseResponse(status int, body []byte, elapsed time.Duration) *Response {
	r := &Response{Status: status, Body: body, Elapsed: elapsed}
	var wire struct {
		Result     *Result `json:"result"`
		DecisionID string  `json:"decision_id"`
		OPAError
	}
	if err := json.Unmarshal(body, &wire); err == nil {
		r.Result, r.DecisionID, r.Error = wire.Result, wire.DecisionID, wire.OPAError
	} else {
		r.ParseError = err
	}
	return r
}

// Decide posts {"input": input} and parses the answer.
func (b *Bridge) Decide(input any) (*Response, error) {
	body, err := json.Marshal(map[string]any{"input": input})
	if err != nil {
		return nil, err
	}
	return b.Post("application/json", body)
}

// Metrics fetches /metrics from the internal listener and parses the samples.
func (b *Bridge) Metrics() (Samples, error) {
	code, body, err := b.Get(b.InternalURL + "/metrics")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("/metrics: HTTP %d", code)
	}
	return ParseMetrics(string(body))
}

// MetricSum returns the sum of the samples of name whose labels include match.
func (b *Bridge) MetricSum(name string, match map[string]string) (float64, error) {
	s, err := b.Metrics()
	if err != nil {
		return 0, err
	}
	return s.Sum(name, match), nil
}

// Sample is one line of the Prometheus text format.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// Samples is a parsed /metrics page.
type Samples []Sample

// Sum adds the values of the samples called name whose labels include match.
func (s Samples) Sum(name string, match map[string]string) float64 {
	var total float64
outer:
	for _, x := range s {
		if x.Name != name {
			continue
		}
		for k, v := range match {
			if x.Labels[k] != v {
				continue outer
			}
		}
		total += x.Value
	}
	return total
}

// Has reports whether any sample is called name.
func (s Samples) Has(name string) bool {
	for _, x := range s {
		if x.Name == name {
			return true
		}
	}
	return false
}

// ParseMetrics parses the Prometheus text exposition format (samples only).
func ParseMetrics(text string) (Samples, error) {
	var out Samples
	for lineNo, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s := Sample{Labels: map[string]string{}}
		rest := line
		if i := strings.IndexAny(rest, "{ "); i < 0 {
			return nil, fmt.Errorf("metrics line %d: %q", lineNo+1, line)
		} else {
			s.Name = rest[:i]
			rest = rest[i:]
		}
		if strings.HasPrefix(rest, "{") {
			end, labels, err := parseLabels(rest)
			if err != nil {
				return nil, fmt.Errorf("metrics line %d: %w", lineNo+1, err)
			}
			s.Labels = labels
			rest = rest[end:]
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return nil, fmt.Errorf("metrics line %d: no value: %q", lineNo+1, line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %d: %w", lineNo+1, err)
		}
		s.Value = v
		out = append(out, s)
	}
	return out, nil
}

// parseLabels parses `{a="x",b="y"}` at the start of s and returns the index after '}'.
func parseLabels(s string) (int, map[string]string, error) {
	labels := map[string]string{}
	i := 1
	for {
		for i < len(s) && (s[i] == ' ' || s[i] == ',') {
			i++
		}
		if i >= len(s) {
			return 0, nil, fmt.Errorf("unterminated labels in %q", s)
		}
		if s[i] == '}' {
			return i + 1, labels, nil
		}
		eq := strings.IndexByte(s[i:], '=')
		if eq < 0 {
			return 0, nil, fmt.Errorf("bad labels in %q", s)
		}
		key := strings.TrimSpace(s[i : i+eq])
		i += eq + 1
		if i >= len(s) || s[i] != '"' {
			return 0, nil, fmt.Errorf("bad label value in %q", s)
		}
		i++
		var val strings.Builder
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' && i+1 < len(s) {
				i++
				switch s[i] {
				case 'n':
					val.WriteByte('\n')
				default:
					val.WriteByte(s[i])
				}
				continue
			}
			val.WriteByte(s[i])
		}
		if i >= len(s) {
			return 0, nil, fmt.Errorf("unterminated label value in %q", s)
		}
		i++ // closing quote
		labels[key] = val.String()
	}
}
