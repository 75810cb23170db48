package opaplugins

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"

	"github.com/go-kit/log/level"
	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/loader"
	"github.com/open-policy-agent/opa/v1/metrics"
	"github.com/open-policy-agent/opa/v1/server"

	"github.com/sar-bridge/sar-bridge/internal/decisionlog"
)

// defaultMask is the decision log mask OPA's plugin always applies (a bundle's or
// --policies' own system.log.mask rules add to it): what can hold a credential in a
// decision's input never leaves the process.
//
//go:embed mask.rego
var defaultMask string

const defaultMaskFile = "sar-bridge/system_log_mask.rego"

// maskModules returns the default mask, parsed, by file name.
func maskModules() (map[string]*ast.Module, error) {
	m, err := ast.ParseModuleWithOpts(defaultMaskFile, defaultMask, ast.ParserOptions{RegoVersion: ast.RegoV1})
	if err != nil {
		return nil, fmt.Errorf("the default decision log mask: %w", err)
	}
	return map[string]*ast.Module{defaultMaskFile: m}, nil
}

// initFiles gives OPA's store the default mask before any bundle, so that decision
// logs are masked with no bundle configured.
func initFiles() (loader.Result, error) {
	mods, err := maskModules()
	if err != nil {
		return loader.Result{}, err
	}
	return loader.Result{Modules: map[string]*loader.RegoFile{
		defaultMaskFile: {Name: defaultMaskFile, Parsed: mods[defaultMaskFile], Raw: []byte(defaultMask)},
	}}, nil
}

// DecisionLog returns the decision log, nil when decision_logs is not configured.
func (p *Plugins) DecisionLog() decisionlog.Log {
	if p == nil || p.logs == nil {
		return nil
	}
	return decisionLog{p}
}

type decisionLog struct{ p *Plugins }

// LogDecision hands the decision to OPA's decision log plugin, which masks it,
// buffers it and uploads it in batches (or writes it to the console).
func (l decisionLog) LogDecision(ctx context.Context, e decisionlog.Event) {
	input, err := ast.JSON(e.Input)
	if err != nil {
		level.Error(l.p.logger).Log("component", "opa-plugins", "msg", "decision not logged: input", "decision_id", e.ID, "err", err)
		return
	}
	info := &server.Info{
		DecisionID: e.ID,
		Path:       e.Path,
		Timestamp:  e.Timestamp,
		RemoteAddr: e.RequestedBy,
		Input:      &input,
		InputAST:   e.Input,
		Error:      eventError(e.Err),
		Bundles:    l.p.activation.revisions(),
		Metrics:    durationMetrics{Metrics: metrics.New(), nanos: e.Duration.Nanoseconds()},
	}
	if e.Result != nil {
		result, err := ast.JSON(e.Result)
		if err != nil {
			level.Error(l.p.logger).Log("component", "opa-plugins", "msg", "decision not logged: result", "decision_id", e.ID, "err", err)
			return
		}
		info.Results = &result
	}
	if err := l.p.logs.Log(ctx, info); err != nil {
		level.Error(l.p.logger).Log("component", "opa-plugins", "msg", "decision not logged", "decision_id", e.ID, "err", err)
	}
}

// durationMetrics reports the decision's whole time as OPA's server does its
// handler's, timer_server_handler_ns.
type durationMetrics struct {
	metrics.Metrics
	nanos int64
}

func (m durationMetrics) All() map[string]any {
	all := m.Metrics.All()
	all["timer_server_handler_ns"] = m.nanos
	return all
}

// decisionError is how an error appears in an event, as OPA's own do: a code and a
// message (a plain error would encode as {}).
type decisionError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *decisionError) Error() string { return e.Message }

func eventError(err error) error {
	if err == nil {
		return nil
	}
	return &decisionError{Code: "sar_bridge_error", Message: err.Error()}
}

// DefaultDecisionLogBufferBytes bounds OPA's decision log buffer where the
// configuration sets no bound: OPA's own default is none, so a log service that is
// down would let the buffer grow until the bridge is OOM-killed (issue 31). Past it
// OPA drops the oldest events, and says so.
const DefaultDecisionLogBufferBytes = 16 << 20

// boundDecisionLogBuffer sets reporting.buffer_size_limit_bytes in a decision_logs
// configuration that bounds its buffer in no other way (an event-count buffer, or a
// rate limit, which OPA refuses beside a byte limit).
func boundDecisionLogBuffer(raw []byte) ([]byte, error) {
	if len(raw) == 0 {
		return raw, nil
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("OPA configuration, decision_logs: %w", err)
	}
	reporting, _ := cfg["reporting"].(map[string]any)
	if reporting == nil {
		reporting = map[string]any{}
	}
	if t, _ := reporting["buffer_type"].(string); t == "event" {
		return raw, nil // bounded by buffer_size_limit_events (OPA's default 10,000)
	}
	for _, bound := range []string{"buffer_size_limit_bytes", "max_decisions_per_second"} {
		if _, set := reporting[bound]; set {
			return raw, nil
		}
	}
	reporting["buffer_size_limit_bytes"] = DefaultDecisionLogBufferBytes
	cfg["reporting"] = reporting
	return json.Marshal(cfg)
}
