package interlink

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/go-kit/log/level"
)

// refusal is a request the relay answers itself, before any route: it is neither
// decided nor forwarded.
type refusal struct {
	status int
	reason string // log field
	msg    string
	// close ends the connection after the answer: a client that asked to switch
	// protocols or to tunnel may already have sent bytes meant for the other side.
	close bool
}

// maxLoggedTarget bounds a request target quoted in an answer or a log line.
const maxLoggedTarget = 256

// screen refuses what interLink never sends, before anything is decided or forwarded:
//
//   - HTTP/2 (the "PRI * HTTP/2.0" preface reaches handlers on an HTTP/1 listener);
//   - CONNECT and protocol upgrades: relayed, a plugin's 101 turns interLink's connection
//     into a raw tunnel to the plugin, and the creates sent inside it are never decided;
//   - any target but the routes' exact spelling: plugin frameworks differ in what they
//     route to /create ("/create;x", "/create%20", "/create/", "//create", "/CREATE",
//     "/cr%65ate", …), so only the bytes interLink sends are routed at all.
func screen(req *http.Request) *refusal {
	switch {
	case req.ProtoMajor != 1:
		return &refusal{status: http.StatusHTTPVersionNotSupported, reason: "http2", close: true,
			msg: "HTTP version not supported: the interLink listener serves HTTP/1.1 only, as interLink speaks to its plugin"}
	case req.Method == http.MethodConnect:
		return &refusal{status: http.StatusNotImplemented, reason: "connect", close: true,
			msg: "not implemented: CONNECT is not relayed: interLink never tunnels through its plugin"}
	case asksUpgrade(req.Header):
		return &refusal{status: http.StatusBadRequest, reason: "upgrade", close: true,
			msg: "bad request: protocol upgrades are not relayed (an Upgrade header, or upgrade in Connection): interLink never upgrades"}
	}
	if _, ok := routes[req.RequestURI]; !ok {
		return &refusal{status: http.StatusNotFound, reason: "unknown-route",
			msg: fmt.Sprintf("not found: %s is not a route of interLink's plugin API (POST /create, POST /delete, GET /status, GET /getLogs, GET /system-info, spelt exactly, without a query)",
				strconv.Quote(truncate(req.RequestURI, maxLoggedTarget)))}
	}
	return nil
}

// asksUpgrade reports a request that asks to switch protocols in any form: an Upgrade
// header, whatever its value, or "upgrade" among the comma-separated tokens of any
// Connection header, in any case and under any spelling of the header names. Go's
// ReverseProxy needs both to tunnel; either one is refused, so that no reader of the
// headers, the plugin's framework included, can see an upgrade.
func asksUpgrade(h http.Header) bool {
	for name, values := range h {
		if strings.EqualFold(name, "Upgrade") {
			return true
		}
		if !strings.EqualFold(name, "Connection") {
			continue
		}
		for _, v := range values {
			for _, token := range strings.Split(v, ",") {
				if strings.EqualFold(strings.Trim(token, " \t"), "upgrade") {
					return true
				}
			}
		}
	}
	return false
}

// refuseRequest answers a screened-out request with one plain-text line, counts it
// under route "refused" and logs it at debug (never a body; the target bounded).
func (r *Relay) refuseRequest(w http.ResponseWriter, req *http.Request, ref *refusal) {
	if ref.close {
		w.Header().Set("Connection", "close")
	}
	writeLine(w, ref.status, ref.msg)
	r.refusals.WithLabelValues(strconv.Itoa(ref.status)).Inc()
	level.Debug(r.logger).Log("msg", "interlink request refused", "reason", ref.reason, "method", req.Method,
		"target", truncate(req.RequestURI, maxLoggedTarget), "code", ref.status)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
