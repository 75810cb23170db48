package interlink

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// rawConn is a client connection to the relay that writes bytes as given, so request
// lines no HTTP client would send reach the listener exactly.
type rawConn struct {
	conn net.Conn
	br   *bufio.Reader
}

func dialRaw(t *testing.T, url string) *rawConn {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	return &rawConn{conn: conn, br: bufio.NewReader(conn)}
}

func (c *rawConn) write(t *testing.T, s string) {
	t.Helper()
	if _, err := io.WriteString(c.conn, s); err != nil {
		t.Fatal(err)
	}
}

// read reads one response and its whole body.
func (c *rawConn) read() (*http.Response, string, error) {
	res, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return nil, "", err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	return res, string(body), err
}

// rawRequest is a request as interLink would send it, with target and extra header lines
// as given.
func rawRequest(method, target, headers, body string) string {
	return fmt.Sprintf("%s %s HTTP/1.1\r\nHost: interlink\r\nContent-Type: application/json\r\nInterlink-Http-Session: s-1\r\n%sContent-Length: %d\r\n\r\n%s",
		method, target, headers, len(body), body)
}

// Only the plugin API's routes, spelt exactly as interLink spells them, are relayed or
// decided: every other spelling a plugin framework might still route to one of them
// (matrix parameters, escapes, dot segments, doubled or trailing slashes, case, a query)
// is refused with a readable 404, never decided, never forwarded.
func TestRefusesUnnamedRoutes(t *testing.T) {
	const notFound = "sar-bridge: not found: %q is not a route of interLink's plugin API (POST /create, POST /delete, GET /status, GET /getLogs, GET /system-info, spelt exactly, without a query)"
	tests := []struct {
		method, target string
		goRefuses      bool // net/http answers 400 itself before any handler
	}{
		// What net/http refuses itself never reaches a handler.
		{method: "POST", target: "%2fcreate", goRefuses: true},
		{method: "POST", target: "create", goRefuses: true},
		{method: "POST", target: "/create%", goRefuses: true},
		{method: "POST", target: "/create\x00", goRefuses: true},
		{method: "POST", target: "/create\t", goRefuses: true},
		{method: "POST", target: "/create /x", goRefuses: true},

		{method: "POST", target: "/create;x"},
		{method: "POST", target: "/create;jsessionid=1"},
		{method: "POST", target: "/create%00"},
		{method: "POST", target: "/create%20"},
		{method: "POST", target: "/create%2f"},
		{method: "POST", target: "/create/"},
		{method: "POST", target: "/create/."},
		{method: "POST", target: "/create/.."},
		{method: "POST", target: "/create."},
		{method: "POST", target: "/create.json"},
		{method: "POST", target: "//create"},
		{method: "POST", target: "///create"},
		{method: "POST", target: "/./create"},
		{method: "POST", target: "/x/../create"},
		{method: "POST", target: "/%2e/create"},
		{method: "POST", target: "/%2fcreate"},
		{method: "POST", target: "/cr%65ate"},
		{method: "POST", target: "/%63reate"},
		{method: "POST", target: "/CREATE"},
		{method: "POST", target: "/Create"},
		{method: "POST", target: "//Create/"},
		{method: "POST", target: "/create?x"},
		{method: "POST", target: "/create?"},
		{method: "POST", target: "/create#x"},
		{method: "POST", target: "http://plugin/create"},
		{method: "POST", target: "/delete/"},
		{method: "GET", target: "/status;x"},
		{method: "GET", target: "/Status"},
		{method: "GET", target: "/getlogs"},
		{method: "GET", target: "/getLogs?follow=true"},
		{method: "GET", target: "/system-info/"},
		{method: "GET", target: "/"},
		{method: "GET", target: "/pinglink"},
		{method: "GET", target: "/updateCache"},
		{method: "GET", target: "/metrics"},
		{method: "OPTIONS", target: "*"},
		{method: "PUT", target: "/something/new?x=1"},
	}
	d := &fakeDecider{d: allowed(nil)}
	h := newHarness(t, d, Options{})
	refused := 0
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.target, func(t *testing.T) {
			c := dialRaw(t, h.url)
			c.write(t, rawRequest(tt.method, tt.target, "", createBodyFixture))
			res, body, err := c.read()
			if err != nil {
				t.Fatal(err)
			}
			if tt.goRefuses {
				if res.StatusCode != http.StatusBadRequest {
					t.Errorf("got %d %q, want net/http's own 400", res.StatusCode, body)
				}
				return
			}
			refused++
			if want := fmt.Sprintf(notFound, tt.target); res.StatusCode != http.StatusNotFound || body != want {
				t.Errorf("got %d %q\nwant 404 %q", res.StatusCode, body, want)
			}
			if ct := res.Header.Get("Content-Type"); ct != "text/plain; charset=utf-8" {
				t.Errorf("Content-Type %q", ct)
			}
		})
	}
	if got := h.plugin.requests(); len(got) != 0 {
		t.Errorf("the plugin got %d requests, the first %s %s", len(got), got[0].method, got[0].path)
	}
	if len(d.inputs) != 0 {
		t.Errorf("%d variants were decided", len(d.inputs))
	}
	if n := eventualRequestCount(t, h.reg, "refused", "404", float64(refused)); n != float64(refused) {
		t.Errorf("requests_total{route=refused,code=404} = %v, want %d", n, refused)
	}
	if n := requestCount(t, h.reg, "create", "404"); n != 0 {
		t.Errorf("refusals counted as creates: %v", n)
	}
}

// interLink never switches protocols or tunnels: a request asking to, in any of the
// forms Go's ReverseProxy or a plugin framework would honour, is refused, and the
// connection closed behind it. Nothing reaches the plugin or the decider.
func TestRefusesUpgradesAndTunnels(t *testing.T) {
	const (
		upgradeRefused = "sar-bridge: bad request: protocol upgrades are not relayed (an Upgrade header, or upgrade in Connection): interLink never upgrades"
		connectRefused = "sar-bridge: not implemented: CONNECT is not relayed: interLink never tunnels through its plugin"
		http2Refused   = "sar-bridge: HTTP version not supported: the interLink listener serves HTTP/1.1 only, as interLink speaks to its plugin"
	)
	tests := []struct {
		name, request string
		status        int
		body          string
	}{
		{"h2c upgrade", rawRequest("GET", "/status", "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n", "[]"), 400, upgradeRefused},
		{"websocket upgrade", rawRequest("GET", "/getLogs", "Connection: keep-alive, UPGRADE\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n", "{}"), 400, upgradeRefused},
		{"upgrade on create", rawRequest("POST", "/create", "Connection: Upgrade\r\nUpgrade: h2c\r\n", createBodyFixture), 400, upgradeRefused},
		{"upgrade on delete", rawRequest("POST", "/delete", "Connection: upgrade\r\nUpgrade: tcp\r\n", "{}"), 400, upgradeRefused},
		{"Connection token only", rawRequest("GET", "/status", "Connection: upgrade\r\n", "[]"), 400, upgradeRefused},
		{"Upgrade header only", rawRequest("GET", "/status", "Upgrade: h2c\r\n", "[]"), 400, upgradeRefused},
		{"empty Upgrade header", rawRequest("GET", "/status", "Upgrade:\r\n", "[]"), 400, upgradeRefused},
		{"second Connection line", rawRequest("GET", "/status", "Connection: keep-alive\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n", "[]"), 400, upgradeRefused},
		{"token among others, odd spacing", rawRequest("GET", "/status", "Connection: close,\t UpGrAdE ,te\r\nUpgrade: h2c\r\n", "[]"), 400, upgradeRefused},
		{"lower-case names", rawRequest("GET", "/status", "connection: Upgrade\r\nupgrade: h2c\r\n", "[]"), 400, upgradeRefused},
		{"upgrade on an unknown route", rawRequest("GET", "/ws", "Connection: Upgrade\r\nUpgrade: websocket\r\n", ""), 400, upgradeRefused},
		{"CONNECT authority", "CONNECT plugin:80 HTTP/1.1\r\nHost: plugin:80\r\n\r\n", 501, connectRefused},
		{"CONNECT path", "CONNECT /create HTTP/1.1\r\nHost: interlink\r\n\r\n", 501, connectRefused},
		{"HTTP/2 prior knowledge", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00", 505, http2Refused},
	}
	d := &fakeDecider{d: allowed(nil)}
	h := newHarness(t, d, Options{})
	h.plugin.switch101 = switchOnUpgrade
	codes := map[string]float64{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := dialRaw(t, h.url)
			c.write(t, tt.request)
			res, body, err := c.read()
			if err != nil {
				t.Fatal(err)
			}
			codes[fmt.Sprint(tt.status)]++
			if res.StatusCode != tt.status || body != tt.body {
				t.Errorf("got %d %q\nwant %d %q", res.StatusCode, body, tt.status, tt.body)
			}
			if ct := res.Header.Get("Content-Type"); ct != "text/plain; charset=utf-8" {
				t.Errorf("Content-Type %q", ct)
			}
			// Whatever the client meant to say next is never read (the write itself may
			// fail: the relay has closed the connection).
			_, _ = io.WriteString(c.conn, rawRequest("POST", "/create", "", createBodyFixture))
			if res, body, err := c.read(); err == nil {
				t.Errorf("the connection stayed open: the next request got %d %q", res.StatusCode, body)
			}
		})
	}
	if got := h.plugin.requests(); len(got) != 0 {
		t.Errorf("the plugin got %d requests, the first %s %s", len(got), got[0].method, got[0].path)
	}
	if len(d.inputs) != 0 {
		t.Errorf("%d requests were decided", len(d.inputs))
	}
	for code, want := range codes {
		if n := eventualRequestCount(t, h.reg, "refused", code, want); n != want {
			t.Errorf("requests_total{route=refused,code=%s} = %v, want %v", code, n, want)
		}
	}
}

// The listener serves no HTTP/2: a real client speaking h2c with prior knowledge gets
// no answer it can read, and nothing reaches the plugin.
func TestListenerServesNoHTTP2(t *testing.T) {
	h := newHarness(t, &fakeDecider{d: allowed(nil)}, Options{})
	var h2c http.Protocols
	h2c.SetUnencryptedHTTP2(true)
	client := &http.Client{Transport: &http.Transport{Protocols: &h2c}, Timeout: 10 * time.Second}
	res, err := client.Get(h.url + "/status")
	if err == nil {
		res.Body.Close()
		t.Errorf("an h2c request got %s %d", res.Proto, res.StatusCode)
	}
	if p := h.relay.Server(time.Minute).Protocols; p != nil && (p.UnencryptedHTTP2() || !p.HTTP1()) {
		t.Errorf("the listener's protocols are %v, want Go's default (HTTP/1 only without TLS)", p)
	}
	if got := h.plugin.requests(); len(got) != 0 {
		t.Errorf("the plugin got %d requests", len(got))
	}
}

// The attack of issue 31: a GET /status asking for h2c, relayed to a plugin that
// answers 101, turned interLink's connection into a raw tunnel, and a POST /create sent
// inside it reached the plugin undecided. Sent one after the other, or both at once.
func TestNoCreateThroughATunnel(t *testing.T) {
	upgrade := rawRequest("GET", "/status", "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n", "[]")
	smuggled := rawRequest("POST", "/create", "", createBodyFixture)
	for _, pipelined := range []bool{false, true} {
		t.Run(fmt.Sprintf("pipelined=%v", pipelined), func(t *testing.T) {
			d := &fakeDecider{d: denied("no")}
			h := newHarness(t, d, Options{})
			h.plugin.switch101 = switchOnUpgrade
			c := dialRaw(t, h.url)
			if pipelined {
				c.write(t, upgrade+smuggled)
			} else {
				c.write(t, upgrade)
			}
			res, body, err := c.read()
			if err != nil {
				t.Fatal(err)
			}
			if res.StatusCode == http.StatusSwitchingProtocols {
				t.Errorf("the relay switched protocols: %v", res.Header)
				if !pipelined {
					c.write(t, smuggled)
				}
				if res, body, err := c.read(); err == nil {
					t.Errorf("the create inside the tunnel got %d %q", res.StatusCode, body)
				}
			} else if res.StatusCode != http.StatusBadRequest || !strings.HasPrefix(body, "sar-bridge: bad request: protocol upgrades are not relayed") {
				t.Errorf("got %d %q, want the 400 refusing the upgrade", res.StatusCode, body)
			}
			for _, r := range h.plugin.requests() {
				t.Errorf("the plugin got %s %s (tunnelled: %v, Upgrade %q)", r.method, r.path, r.tunnelled, r.header.Get("Upgrade"))
			}
			if len(d.inputs) != 0 {
				t.Errorf("%d requests were decided", len(d.inputs))
			}
		})
	}
}

// Defence in depth: a plugin that answers 101 anyway never gets a tunnel. The relay
// asks the plugin for no upgrade, even when the screen in front of it is skipped, and
// answers a switch with 502; the switched connection to the plugin is closed, so what
// follows on interLink's connection is an ordinary request again.
func TestPluginSwitchingProtocolsIsRefused(t *testing.T) {
	const switched = "sar-bridge: bad gateway: the plugin answered 101 Switching Protocols, which the relay never relays"
	for _, screened := range []bool{true, false} {
		t.Run(fmt.Sprintf("screened=%v", screened), func(t *testing.T) {
			h := newHarness(t, &fakeDecider{d: allowed(nil)}, Options{})
			h.plugin.switch101 = switchAlways
			url, headers := h.url, ""
			if !screened {
				// The relaying handler alone, as if an upgrade had got past the screen.
				srv := httptest.NewServer(http.HandlerFunc(h.relay.relay))
				t.Cleanup(srv.Close)
				url, headers = srv.URL, "Connection: Upgrade\r\nUpgrade: h2c\r\n"
			}
			c := dialRaw(t, url)
			for i := 0; i < 2; i++ {
				c.write(t, rawRequest("GET", "/status", headers, "[]"))
				res, body, err := c.read()
				if err != nil {
					t.Fatal(err)
				}
				if res.StatusCode != http.StatusBadGateway || body != switched {
					t.Errorf("request %d: got %d %q\nwant 502 %q", i, res.StatusCode, body, switched)
				}
			}
			got := waitRequests(h.plugin, 2)
			if len(got) != 2 {
				t.Errorf("the plugin got %d requests, want the two GET /status", len(got))
			}
			for _, r := range got {
				if r.tunnelled || r.path != "/status" {
					t.Errorf("the plugin got %s %s (tunnelled: %v)", r.method, r.path, r.tunnelled)
				}
				if up, conn := r.header.Get("Upgrade"), r.header.Get("Connection"); up != "" || conn != "" {
					t.Errorf("the plugin was asked to upgrade: Upgrade %q, Connection %q", up, conn)
				}
			}
			if want := `level=warn msg="plugin tried to switch protocols" plugin=` + h.plugin.srv.URL + ` route=status`; !strings.Contains(h.logs.String(), want) {
				t.Errorf("log %q, want a line containing %q", h.logs.String(), want)
			}
		})
	}
}

// waitRequests waits (up to 2s) for the plugin to have recorded n requests and a moment
// more, so that one recorded late is seen too.
func waitRequests(p *plugin, n int) []received {
	deadline := time.Now().Add(2 * time.Second)
	for len(p.requests()) < n && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	return p.requests()
}

// Each relayed route takes only the method interLink sends on it: a plugin framework
// routing by path alone would otherwise run a handler interLink never calls that way.
func TestRelayedRouteMethods(t *testing.T) {
	tests := []struct {
		method, path, allow, route string
	}{
		{http.MethodGet, "/delete", http.MethodPost, "delete"},
		{http.MethodDelete, "/delete", http.MethodPost, "delete"},
		{http.MethodPost, "/status", http.MethodGet, "status"},
		{http.MethodHead, "/status", http.MethodGet, "status"},
		{http.MethodPut, "/getLogs", http.MethodGet, "getLogs"},
		{http.MethodPost, "/system-info", http.MethodGet, "system-info"},
		{http.MethodPut, "/create", http.MethodPost, "create"},
		{"TRACE", "/create", http.MethodPost, "create"},
	}
	d := &fakeDecider{d: allowed(nil)}
	h := newHarness(t, d, Options{})
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			res, body := h.do(t, tt.method, tt.path, []byte(createBodyFixture))
			want := fmt.Sprintf("sar-bridge: bad request: method %s not allowed on %s", tt.method, tt.path)
			if tt.method == http.MethodHead {
				want = "" // no body in an answer to HEAD
			}
			if res.StatusCode != http.StatusMethodNotAllowed || res.Header.Get("Allow") != tt.allow || string(body) != want {
				t.Errorf("got %d %q (Allow %q), want 405 %q (Allow %s)", res.StatusCode, body, res.Header.Get("Allow"), want, tt.allow)
			}
		})
	}
	for route, want := range map[string]float64{"delete": 2, "status": 2, "getLogs": 1, "system-info": 1, "create": 2} {
		if n := eventualRequestCount(t, h.reg, route, "405", want); n != want {
			t.Errorf("requests_total{route=%q,code=405} = %v, want %v", route, n, want)
		}
	}
	if n := testutil.ToFloat64(h.relay.creates.WithLabelValues(outcomeInvalid)); n != 2 {
		t.Errorf("creates_total{outcome=invalid} = %v, want 2", n)
	}
	if got := h.plugin.requests(); len(got) != 0 {
		t.Errorf("the plugin got %d requests, the first %s %s", len(got), got[0].method, got[0].path)
	}
	if len(d.inputs) != 0 {
		t.Errorf("%d requests were decided", len(d.inputs))
	}
}

// Refusals are logged at debug, with what was refused and why, and no body.
func TestRefusalsLogged(t *testing.T) {
	h := newHarness(t, &fakeDecider{}, Options{})
	c := dialRaw(t, h.url)
	c.write(t, rawRequest("POST", "/create;x", "", createBodyFixture))
	if _, _, err := c.read(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for !strings.Contains(h.logs.String(), "refused") && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	line := h.logs.String()
	const want = `level=debug msg="interlink request refused" reason=unknown-route method=POST target=/create;x code=404`
	if !strings.Contains(line, want) || strings.Contains(line, `"pod"`) {
		t.Errorf("log %q, want a line containing %q and no body", line, want)
	}
}
