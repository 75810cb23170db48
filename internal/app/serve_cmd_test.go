package app

import (
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
		check   func(t *testing.T, cfg serveOptions)
	}{
		{name: "defaults", check: func(t *testing.T, cfg serveOptions) {
			if cfg.authn.mode != "token" {
				t.Errorf("authn mode on :8080 = %q, want token", cfg.authn.mode)
			}
			if cfg.web.listen != ":8080" || cfg.web.internalListen != ":8081" || cfg.decision.tenantLabel != "interlink.io/tenant" ||
				cfg.cache.allowedTTL != 5*time.Minute || cfg.cache.deniedTTL != 30*time.Second || cfg.decision.nodeAccess {
				t.Errorf("unexpected defaults: %+v", cfg)
			}
		}},
		{name: "mappings repeated and comma separated", args: []string{"--openshift.mappings", "a=a.io,b=b.io", "--openshift.mappings=*=x.io"},
			check: func(t *testing.T, cfg serveOptions) {
				if g, _ := cfg.decision.mappings.Group("b"); g != "b.io" {
					t.Errorf("b -> %q", g)
				}
				if g, _ := cfg.decision.mappings.Group("zzz"); g != "x.io" {
					t.Errorf("fallback -> %q", g)
				}
			}},
		{name: "mapping without =", args: []string{"--openshift.mappings", "tenant-a"}, wantErr: `--openshift.mappings: mapping "tenant-a": want tenant=group`},
		{name: "unknown flag", args: []string{"--opa.nope"}, wantErr: "unknown flag: --opa.nope"},
		{name: "stray argument", args: []string{"serve"}, wantErr: "unexpected arguments: serve"},
		{name: "negative ttl", args: []string{"--cache.denied-ttl=-1s"}, wantErr: "must not be negative"},
		{name: "zero cache size", args: []string{"--cache.size=0"}, wantErr: "--cache.size must be at least 1"},
		{name: "bad duration", args: []string{"--review.timeout=soon"}, wantErr: `invalid argument "soon"`},
		{name: "empty tenant label", args: []string{"--tenant.label="}, wantErr: "--tenant.label must not be empty"},
		{name: "loopback defaults to no caller authentication", args: []string{"--web.listen=127.0.0.1:8080"},
			check: func(t *testing.T, cfg serveOptions) {
				if cfg.authn.mode != "none" {
					t.Errorf("authn mode = %q, want none", cfg.authn.mode)
				}
			}},
		{name: "none on all interfaces refused", args: []string{"--authn.mode=none"}, wantErr: `--authn.mode=none on --web.listen ":8080" would answer any caller`},
		{name: "none on all interfaces when insisted", args: []string{"--authn.mode=none", "--authn.insecure-allow-any-caller"},
			check: func(t *testing.T, cfg serveOptions) {}},
		{name: "unknown authn mode", args: []string{"--authn.mode=basic"}, wantErr: "--authn.mode"},
		{name: "mtls needs certificates", args: []string{"--authn.mode=mtls"}, wantErr: "--authn.mode=mtls needs"},
		{name: "client CA without mtls", args: []string{"--tls.client-ca-file=ca.pem"}, wantErr: "only used with --authn.mode=mtls"},
		{name: "cert without key", args: []string{"--tls.server.cert-file=c.pem"}, wantErr: "go together"},
		{name: "bad TLS version", args: []string{"--tls.min-version=VersionTLS10"}, wantErr: "--tls.min-version"},
		{name: "bad cipher suite", args: []string{"--tls.cipher-suites=TLS_FAKE"}, wantErr: "--tls.cipher-suites"},
		{name: "unsupported opa-openshift flag", args: []string{"--debug.token=x"}, wantErr: "--debug.token is not supported by sar-bridge"},
		{name: "opa-openshift flags", args: []string{"--opa.package=lokistack", "--opa.matcher=kubernetes_namespace_name,k8s_namespace_name", "--opa.viaq-to-otel-migration", "--opa.skip-tenants=audit,infrastructure"},
			check: func(t *testing.T, cfg serveOptions) {
				if strings.Join(cfg.openshift.config.Path, "/") != "lokistack/allow" || len(cfg.openshift.config.Matchers) != 2 || len(cfg.openshift.config.SkipTenants) != 2 {
					t.Errorf("openshift config = %+v", cfg.openshift.config)
				}
			}},
		{name: "bad opa package", args: []string{"--opa.package=loki-stack"}, wantErr: `--opa.package "loki-stack" is not a Rego package name`},
		{name: "matcher without package", args: []string{"--opa.matcher=x"}, wantErr: "need --opa.package"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := parseFlags(tt.args)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, cfg)
		})
	}
}

func TestNewLogger(t *testing.T) {
	tests := []struct {
		level, format, wantErr string
	}{
		{"info", "logfmt", ""},
		{"debug", "json", ""},
		{"loud", "logfmt", `--log.level "loud"`},
		{"info", "xml", `--log.format "xml"`},
	}
	for _, tt := range tests {
		_, err := newLogger(tt.level, tt.format)
		if (err == nil) != (tt.wantErr == "") || err != nil && !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("newLogger(%q, %q) = %v, want %q", tt.level, tt.format, err, tt.wantErr)
		}
	}
}

// TestTuneGC: without GOGC the server collects at gcPercent; with it, the operator's
// value stands (the runtime read it at start, tuneGC leaves it alone).
func TestTuneGC(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	for _, tc := range []struct {
		gogc string
		want int
	}{{"", gcPercent}, {"150", 100}} {
		t.Setenv("GOGC", tc.gogc)
		debug.SetGCPercent(100)
		tuneGC()
		if got := debug.SetGCPercent(100); got != tc.want {
			t.Errorf("GOGC=%q: GC percent %d, want %d", tc.gogc, got, tc.want)
		}
	}
}
