package cluster

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// PluginRequest is one request a Plugin received.
type PluginRequest struct {
	Method string
	Path   string
	Header http.Header
	Body   []byte
}

// Plugin is a stand-in interLink plugin (SLURM, HTCondor, …) on TCP or a unix socket. It
// records every request and answers as a plugin does: /create with {"PodUID","PodJID"},
// /status with the pods, /delete with an empty 200, /getLogs streamed: LogFirstLine at
// once, then LogRest once ReleaseLogs is called.
type Plugin struct {
	// URL is what --interlink.plugin-url takes: http://127.0.0.1:PORT or unix:///path.
	URL string

	ln      net.Listener
	srv     *http.Server
	mu      sync.Mutex
	got     []PluginRequest
	release chan struct{}
	once    sync.Once
}

// Answers of the stand-in plugin.
const (
	// PluginCreateAnswer is the exact /create answer (odd spacing on purpose: it must
	// come back byte for byte).
	PluginCreateAnswer = `{"PodUID": "0b5e3c9a-2222-4a2b-9c3d-000000000002",  "PodJID":"slurm-4242"}` + "\n"
	PluginStatusAnswer = `[{"name":"job","UID":"0b5e3c9a-2222-4a2b-9c3d-000000000002","namespace":"ns","JID":"slurm-4242","containers":[]}]`
	LogFirstLine       = "2026-01-01T00:00:00Z first line\n"
	LogRest            = "2026-01-01T00:00:01Z second line\n"
)

// StartPlugin listens on network ("tcp" for 127.0.0.1:0, or "unix" for the socket path
// address).
func StartPlugin(network, address string) (*Plugin, error) {
	if network == "tcp" {
		address = "127.0.0.1:0"
	}
	ln, err := net.Listen(network, address)
	if err != nil {
		return nil, err
	}
	p := &Plugin{ln: ln, release: make(chan struct{})}
	if network == "unix" {
		p.URL = "unix://" + address
	} else {
		p.URL = "http://" + ln.Addr().String()
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

func (p *Plugin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	p.got = append(p.got, PluginRequest{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
	p.mu.Unlock()
	w.Header().Set("X-Plugin", "stand-in")
	switch r.URL.Path {
	case "/create":
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, PluginCreateAnswer)
	case "/status":
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, PluginStatusAnswer)
	case "/getLogs":
		p.streamLogs(w, r)
	case "/delete":
		w.WriteHeader(http.StatusOK)
	default:
		http.NotFound(w, r)
	}
}

func (p *Plugin) streamLogs(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain")
	_, _ = io.WriteString(w, LogFirstLine)
	if err := http.NewResponseController(w).Flush(); err != nil {
		return
	}
	select {
	case <-p.release:
		_, _ = io.WriteString(w, LogRest)
	case <-r.Context().Done():
	case <-time.After(30 * time.Second):
	}
}

// ReleaseLogs lets every /getLogs (current and later) finish.
func (p *Plugin) ReleaseLogs() { p.once.Do(func() { close(p.release) }) }

// Requests returns what the plugin received so far.
func (p *Plugin) Requests() []PluginRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]PluginRequest(nil), p.got...)
}

// Close stops the plugin.
func (p *Plugin) Close() error {
	p.ReleaseLogs()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return p.srv.Close()
	}
	return nil
}

// InterlinkClient is an HTTP client for the bridge's interLink listener: listen is what
// --interlink.listen took (127.0.0.1:PORT or unix:///path). It returns the client and
// the base URL to use with it.
func InterlinkClient(listen string) (*http.Client, string) {
	if socket, ok := strings.CutPrefix(listen, "unix://"); ok {
		return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		}}}, "http://interlink"
	}
	return &http.Client{Transport: &http.Transport{}}, "http://" + listen
}
