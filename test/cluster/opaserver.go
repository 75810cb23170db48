package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// OCIBundleConfig is an OPA configuration with one bundle pulled from a plain-HTTP OCI
// registry: the services/bundles/keys sections OPA's bundle plugin reads.
type OCIBundleConfig struct {
	// RegistryHost is host:port of the registry (or of a proxy in front of it). OPA
	// sends its requests to the service URL http://RegistryHost; the resource names
	// the same host.
	RegistryHost string
	Repository   string
	Tag          string
	// Service and Bundle name the service and the bundle (default "registry", "authz").
	Service string
	Bundle  string
	// Key, when set, makes OPA require bundles signed with it: keys.<KeyID> holds its
	// public key and algorithm, bundles.<Bundle>.signing.keyid names it.
	Key   *SigningKey
	KeyID string // default "k1"
	// Persist sets bundles.<Bundle>.persist: OPA then writes each activated bundle to
	// <persistence directory>/bundles/<Bundle>/bundle.tar.gz and loads it from there at
	// start-up, before (or without) reaching the registry.
	Persist bool
	// PersistenceDirectory is persistence_directory (OPA's default: ./.opa). OPA's OCI
	// downloader keeps its blob store in <it>/oci.
	PersistenceDirectory string
	// MinDelaySeconds and MaxDelaySeconds bound the polling interval (default 1 and 2).
	MinDelaySeconds, MaxDelaySeconds int
	// StatusConsole sets status.console: the bundle status is logged and served by
	// GET /v1/status (active_revision, code, message, errors).
	StatusConsole bool
}

// JSON returns the configuration as JSON (which OPA reads as YAML too).
func (c OCIBundleConfig) JSON() ([]byte, error) {
	if c.RegistryHost == "" || c.Repository == "" || c.Tag == "" {
		return nil, errors.New("OCIBundleConfig: RegistryHost, Repository and Tag are required")
	}
	service := or(c.Service, "registry")
	name := or(c.Bundle, "authz")
	minDelay, maxDelay := c.MinDelaySeconds, c.MaxDelaySeconds
	if minDelay == 0 {
		minDelay = 1
	}
	if maxDelay == 0 {
		maxDelay = max(2, minDelay)
	}
	bundle := map[string]any{
		"service":  service,
		"resource": c.RegistryHost + "/" + c.Repository + ":" + c.Tag,
		"persist":  c.Persist,
		"polling":  map[string]any{"min_delay_seconds": minDelay, "max_delay_seconds": maxDelay},
	}
	cfg := map[string]any{
		"services": map[string]any{service: map[string]any{"url": "http://" + c.RegistryHost, "type": "oci"}},
		"bundles":  map[string]any{name: bundle},
	}
	if c.Key != nil {
		keyID := or(c.KeyID, "k1")
		bundle["signing"] = map[string]any{"keyid": keyID}
		cfg["keys"] = map[string]any{keyID: map[string]any{"key": c.Key.PublicKeyPEM, "algorithm": c.Key.Algorithm}}
	}
	if c.PersistenceDirectory != "" {
		cfg["persistence_directory"] = c.PersistenceDirectory
	}
	if c.StatusConsole {
		cfg["status"] = map[string]any{"console": true}
	}
	return json.MarshalIndent(cfg, "", "  ")
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// OPAServerOptions configures StartOPAServer.
type OPAServerOptions struct {
	Binary     string // the opa CLI (see OPABinary)
	ConfigFile string // --config-file
	// Dir is the working directory (required): OPA's default persistence directory is
	// Dir/.opa.
	Dir string
	// LogPath receives stdout and stderr, appended (default Dir/opa.log).
	LogPath string
	// Args are extra flags of `opa run`.
	Args []string
}

// OPAServer is a real `opa run --server` subprocess on a free loopback port.
type OPAServer struct {
	URL     string // http://127.0.0.1:PORT
	LogPath string

	cmd    *exec.Cmd
	done   chan struct{}
	log    *os.File
	once   sync.Once
	client *http.Client
}

// StartOPAServer runs `opa run --server --addr 127.0.0.1:PORT --config-file ...` with
// debug text logs and waits until GET /health answers 200 (the server is up; the bundle
// may not be activated yet: poll Health(true) or a query for that).
func StartOPAServer(opts OPAServerOptions) (*OPAServer, error) {
	if opts.Binary == "" || opts.Dir == "" {
		return nil, errors.New("OPAServerOptions: Binary and Dir are required")
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	logPath := or(opts.LogPath, filepath.Join(opts.Dir, "opa.log"))
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, err
	}
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	args := []string{"run", "--server", fmt.Sprintf("--addr=127.0.0.1:%d", port), "--log-level=debug", "--log-format=text"}
	if opts.ConfigFile != "" {
		args = append(args, "--config-file="+opts.ConfigFile)
	}
	args = append(args, opts.Args...)
	fmt.Fprintf(lf, "# %s %s\n", opts.Binary, strings.Join(args, " "))
	cmd := exec.Command(opts.Binary, args...)
	cmd.Dir = opts.Dir
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	o := &OPAServer{
		URL:     fmt.Sprintf("http://127.0.0.1:%d", port),
		LogPath: logPath,
		cmd:     cmd,
		done:    make(chan struct{}),
		log:     lf,
		client:  &http.Client{Timeout: 10 * time.Second},
	}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("starting %s: %w", opts.Binary, err)
	}
	go func() { _ = cmd.Wait(); close(o.done) }()
	deadline := time.Now().Add(30 * time.Second)
	last := "no answer"
	for {
		if o.Exited() {
			o.Stop()
			return nil, fmt.Errorf("opa exited at start (log %s)", logPath)
		}
		code, body, err := o.Get("/health")
		if err == nil && code == http.StatusOK {
			return o, nil
		}
		if err != nil {
			last = err.Error()
		} else {
			last = fmt.Sprintf("%d %s", code, body)
		}
		if time.Now().After(deadline) {
			o.Stop()
			return nil, fmt.Errorf("opa not healthy within 30s: last /health: %s (log %s)", last, logPath)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Exited reports whether the process has exited.
func (o *OPAServer) Exited() bool {
	select {
	case <-o.done:
		return true
	default:
		return false
	}
}

// Stop terminates OPA (SIGTERM, then SIGKILL after 10s) and closes its log.
func (o *OPAServer) Stop() {
	o.once.Do(func() {
		if !o.Exited() {
			_ = o.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-o.done:
			case <-time.After(10 * time.Second):
				_ = o.cmd.Process.Kill()
				<-o.done
			}
		}
		_ = o.log.Close()
	})
}

// Log returns OPA's log so far.
func (o *OPAServer) Log() string {
	data, err := os.ReadFile(o.LogPath)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", o.LogPath, err)
	}
	return string(data)
}

// Get performs a GET of path (e.g. /health?bundles, /v1/status) and returns the status
// and body.
func (o *OPAServer) Get(path string) (int, []byte, error) {
	return o.do(http.MethodGet, path, nil)
}

// Query posts {"input": input} to the Data API at /v1/data/<path> (e.g.
// interlink/authz/decision) and returns the answer's result (nil when undefined).
func (o *OPAServer) Query(path string, input any) (json.RawMessage, error) {
	body, err := json.Marshal(map[string]any{"input": input})
	if err != nil {
		return nil, err
	}
	code, b, err := o.do(http.MethodPost, "/v1/data/"+strings.TrimPrefix(path, "/"), body)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("POST /v1/data/%s: %d %s", path, code, b)
	}
	var r struct {
		Result json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("POST /v1/data/%s: %w: %s", path, err, b)
	}
	return r.Result, nil
}

// BundleStatus is one bundle's entry in GET /v1/status (status.console must be on).
type BundleStatus struct {
	Name           string            `json:"name"`
	ActiveRevision string            `json:"active_revision"`
	Code           string            `json:"code"`
	Message        string            `json:"message"`
	Errors         []json.RawMessage `json:"errors"`
	HTTPCode       json.Number       `json:"http_code"`
}

// BundleStatus returns the named bundle's status from GET /v1/status.
func (o *OPAServer) BundleStatus(name string) (*BundleStatus, error) {
	code, b, err := o.Get("/v1/status")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("GET /v1/status: %d %s (is status.console on?)", code, b)
	}
	var r struct {
		Result struct {
			Bundles map[string]*BundleStatus `json:"bundles"`
		} `json:"result"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("GET /v1/status: %w: %s", err, b)
	}
	s, ok := r.Result.Bundles[name]
	if !ok {
		return nil, fmt.Errorf("GET /v1/status: no bundle %q: %s", name, b)
	}
	return s, nil
}

func (o *OPAServer) do(method, path string, body []byte) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, o.URL+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := o.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}
