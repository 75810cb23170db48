package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// EnvRegistry points at the CNCF distribution registry binary; when unset,
// hack/registry.sh builds it once into the cache (from the Go module proxy, at a pinned
// version) and prints its path.
const EnvRegistry = "SAR_BRIDGE_REGISTRY"

// RegistryBinary returns the path of the distribution registry: $SAR_BRIDGE_REGISTRY or
// what hack/registry.sh prints.
func RegistryBinary(ctx context.Context, root string) (string, error) {
	return hackBinary(ctx, root, EnvRegistry, "registry.sh")
}

// hackBinary returns $env (which must exist) or the last line hack/<script> prints.
func hackBinary(ctx context.Context, root, env, script string) (string, error) {
	if p := os.Getenv(env); p != "" {
		abs, err := filepath.Abs(p)
		if err != nil {
			return "", err
		}
		if _, err := os.Stat(abs); err != nil {
			return "", fmt.Errorf("%s: %w", env, err)
		}
		return abs, nil
	}
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "hack", script))
	cmd.Dir = root
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("hack/%s (or set %s): %w\n%s", script, env, err, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	p := strings.TrimSpace(lines[len(lines)-1])
	if p == "" {
		return "", fmt.Errorf("hack/%s printed no path", script)
	}
	return p, nil
}

// Registry is a CNCF distribution registry subprocess: plain HTTP on a loopback port, no
// authentication, blobs and manifests on the filesystem under its work directory (so they
// survive Restart), deletes enabled.
type Registry struct {
	Host       string // 127.0.0.1:PORT, the host part of an OCI reference
	URL        string // http://127.0.0.1:PORT
	LogPath    string // stdout and stderr of every run, appended
	ConfigPath string
	StorageDir string

	binary string
	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	log    *os.File
}

// registryConfig is the registry's configuration: filesystem storage, deletes enabled,
// no health checks or debug listener, text logs.
const registryConfig = `version: 0.1
log:
  level: info
  formatter: text
storage:
  filesystem:
    rootdirectory: %q
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: %q
  secret: sar-bridge-e2e-not-a-secret
  headers:
    X-Content-Type-Options: [nosniff]
`

// StartRegistry runs binary (see RegistryBinary) with a configuration generated into
// workDir, storage under workDir/storage and its log in workDir/registry.log, on a free
// 127.0.0.1 port, and waits until GET /v2/ answers 200. Stop ends it.
func StartRegistry(binary, workDir string) (*Registry, error) {
	if err := os.MkdirAll(workDir, 0o755); err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	host := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	r := &Registry{
		Host:       host,
		URL:        "http://" + host,
		LogPath:    filepath.Join(workDir, "registry.log"),
		ConfigPath: filepath.Join(workDir, "registry.yaml"),
		StorageDir: filepath.Join(workDir, "storage"),
		binary:     binary,
	}
	if err := os.WriteFile(r.ConfigPath, fmt.Appendf(nil, registryConfig, r.StorageDir, host), 0o644); err != nil {
		return nil, err
	}
	if err := r.start(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *Registry) start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running() {
		return errors.New("the registry is already running")
	}
	lf, err := os.OpenFile(r.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(lf, "# %s serve %s\n", r.binary, r.ConfigPath)
	cmd := exec.Command(r.binary, "serve", r.ConfigPath)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Env = registryEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return fmt.Errorf("starting %s: %w", r.binary, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	r.cmd, r.done, r.log = cmd, done, lf

	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(30 * time.Second)
	last := "no answer"
	for {
		select {
		case <-done:
			lf.Close()
			return fmt.Errorf("the registry exited at start (log %s)", r.LogPath)
		default:
		}
		resp, err := client.Get(r.URL + "/v2/")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			r.stopLocked()
			return fmt.Errorf("the registry did not answer GET /v2/ within 30s: %s (log %s)", last, r.LogPath)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// registryEnv is the test's environment without REGISTRY_* (the registry reads those as
// configuration overrides) and with OpenTelemetry export off (the registry would
// otherwise try to send traces to localhost:4318).
func registryEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REGISTRY_") && !strings.HasPrefix(kv, "OTEL_") {
			env = append(env, kv)
		}
	}
	return append(env, "OTEL_TRACES_EXPORTER=none", "OTEL_METRICS_EXPORTER=none", "OTEL_LOGS_EXPORTER=none")
}

func (r *Registry) running() bool {
	if r.done == nil {
		return false
	}
	select {
	case <-r.done:
		return false
	default:
		return true
	}
}

// Running reports whether the registry process is up.
func (r *Registry) Running() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.running()
}

// Stop kills the registry (SIGKILL: clients see connection refused from now on) and
// waits for it to exit. Its storage is kept; a stopped registry may be stopped again.
func (r *Registry) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopLocked()
}

func (r *Registry) stopLocked() {
	if r.running() {
		_ = r.cmd.Process.Kill()
		<-r.done
	}
	if r.log != nil {
		_ = r.log.Close()
		r.log = nil
	}
}

// Restart stops the registry if it runs and starts it again on the same port with the
// same storage, so what was pushed before is served again.
func (r *Registry) Restart() error {
	r.Stop()
	return r.start()
}

// Log returns the registry's log so far.
func (r *Registry) Log() string {
	data, err := os.ReadFile(r.LogPath)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", r.LogPath, err)
	}
	return string(data)
}

// RegistryFaultProxy is a plain-HTTP reverse proxy in front of a registry that answers
// the requests its rule picks with an error status (an OCI error body) and forwards the
// others, so a client (OPA's bundle downloader) can be shown a registry that fails in a
// chosen way while the registry itself keeps its content. For a registry that is gone
// (connection refused) stop it; for one that hangs or drops connections, put a TCP Proxy
// (StartProxy) in front of it instead.
type RegistryFaultProxy struct {
	Host string // 127.0.0.1:PORT: use it as the registry's host
	URL  string // http://127.0.0.1:PORT

	srv     *http.Server
	mu      sync.Mutex
	rule    func(*http.Request) int
	faulted atomic.Int64
}

// StartRegistryFaultProxy starts a proxy to the registry at target (http://host:port)
// that forwards everything until SetRule.
func StartRegistryFaultProxy(target string) (*RegistryFaultProxy, error) {
	u, err := url.Parse(target)
	if err != nil || u.Scheme != "http" || u.Host == "" {
		return nil, fmt.Errorf("registry fault proxy target %q is not an http://host:port URL", target)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &RegistryFaultProxy{Host: ln.Addr().String(), URL: "http://" + ln.Addr().String()}
	rp := httputil.NewSingleHostReverseProxy(u)
	// A stopped registry is answered with 502 Bad Gateway, without a log line per request.
	rp.ErrorLog = log.New(io.Discard, "", 0)
	p.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			p.mu.Lock()
			rule := p.rule
			p.mu.Unlock()
			if rule != nil {
				if code := rule(req); code != 0 {
					p.faulted.Add(1)
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(code)
					if req.Method != http.MethodHead {
						fmt.Fprintf(w, `{"errors":[{"code":"UNKNOWN","message":"fault injected by the test (%d)"}]}`+"\n", code)
					}
					return
				}
			}
			rp.ServeHTTP(w, req)
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// SetRule makes the proxy answer every request for which rule returns a non-zero HTTP
// status with that status; nil forwards everything again.
func (p *RegistryFaultProxy) SetRule(rule func(*http.Request) int) {
	p.mu.Lock()
	p.rule = rule
	p.mu.Unlock()
}

// Faulted counts the requests answered with an injected error.
func (p *RegistryFaultProxy) Faulted() int64 { return p.faulted.Load() }

// Close stops the proxy and closes its connections.
func (p *RegistryFaultProxy) Close() error { return p.srv.Close() }
