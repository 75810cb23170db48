package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
		check   func(t *testing.T, cfg config)
	}{
		{name: "defaults", check: func(t *testing.T, cfg config) {
			if cfg.webListen != ":8080" || cfg.internalListen != ":8081" || cfg.tenantLabel != "interlink.io/tenant" ||
				cfg.allowedTTL != 5*time.Minute || cfg.deniedTTL != 30*time.Second || cfg.nodeAccess {
				t.Errorf("unexpected defaults: %+v", cfg)
			}
		}},
		{name: "mappings repeated and comma separated", args: []string{"--openshift.mappings", "a=a.io,b=b.io", "--openshift.mappings=*=x.io"},
			check: func(t *testing.T, cfg config) {
				if g, _ := cfg.mappings.Group("b"); g != "b.io" {
					t.Errorf("b -> %q", g)
				}
				if g, _ := cfg.mappings.Group("zzz"); g != "x.io" {
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
