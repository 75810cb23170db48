package app

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/sar-bridge/sar-bridge/policies"
)

// The opa-openshift route may not share a document with the pod-decision policy.
func TestOverlappingDocument(t *testing.T) {
	ev, err := policies.New(context.Background(), policies.Options{})
	if err != nil {
		t.Fatal(err)
	}
	docs := ev.Documents()
	tests := []struct {
		pkg, rule string
		wantDoc   string // "" when allowed
	}{
		{"interlink.authz", "decision", "interlink.authz.decision"},
		{"interlink.authz", "allow", "interlink.authz.allow"},
		{"interlink.authz.allow", "x", "interlink.authz.allow"},
		{"interlink", "authz", "interlink.authz"},
		{"interlink.authz.decision", "x", "interlink.authz.decision"},
		{"lokistack", "allow", ""},
		{"interlink", "allow", ""},
		{"observatorium.logs", "allow", ""},
	}
	for _, tt := range tests {
		t.Run(tt.pkg+"/"+tt.rule, func(t *testing.T) {
			path := append(strings.Split(tt.pkg, "."), tt.rule)
			doc, ok := overlappingDocument(path, docs)
			if got := strings.Join(doc, "."); ok != (tt.wantDoc != "") || got != tt.wantDoc {
				t.Errorf("overlappingDocument(%q) = %q, %v; want %q", path, got, ok, tt.wantDoc)
			}
		})
	}
	if !slices.ContainsFunc(docs, func(d []string) bool { return slices.Equal(d, []string{"interlink", "authz", "decision"}) }) {
		t.Errorf("the embedded policy's documents %q lack interlink.authz.decision", docs)
	}
}

func TestOpenShiftFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
		check   func(t *testing.T, cfg serveOptions)
	}{
		{name: "defaults", check: func(t *testing.T, cfg serveOptions) {
			if cfg.openshift.config.MaxSelectorNamespaces != 300 || cfg.decision.informer.notFoundTTL.Seconds() != 5 {
				t.Errorf("max selector namespaces %d, not-found TTL %s; want 300, 5s", cfg.openshift.config.MaxSelectorNamespaces, cfg.decision.informer.notFoundTTL)
			}
		}},
		{name: "set", args: []string{"--opa.max-selector-namespaces=20", "--informer.not-found-ttl=0"}, check: func(t *testing.T, cfg serveOptions) {
			if cfg.openshift.config.MaxSelectorNamespaces != 20 || cfg.decision.informer.notFoundTTL != 0 {
				t.Errorf("got %d, %s", cfg.openshift.config.MaxSelectorNamespaces, cfg.decision.informer.notFoundTTL)
			}
		}},
		{name: "zero selector namespaces", args: []string{"--opa.max-selector-namespaces=0"}, wantErr: "--opa.max-selector-namespaces must be at least 1"},
		{name: "negative TTL", args: []string{"--informer.not-found-ttl=-1s"}, wantErr: "--informer.not-found-ttl must not be negative"},
		{name: "audiences for forwarded tokens without caller tokens",
			args: []string{"--opa.package=lokistack", "--opa.ssar", "--authn.audiences=observatorium"}, check: func(t *testing.T, cfg serveOptions) {
				if cfg.callerAudiences() != nil || !slices.Equal(cfg.authn.audiences, []string{"observatorium"}) {
					t.Errorf("caller audiences %q, forwarded-token audiences %q", cfg.callerAudiences(), cfg.authn.audiences)
				}
			}},
		{name: "audiences of caller tokens", args: []string{"--authn.mode=token", "--authn.audiences=a"}, check: func(t *testing.T, cfg serveOptions) {
			if !slices.Equal(cfg.callerAudiences(), []string{"a"}) {
				t.Errorf("caller audiences %q", cfg.callerAudiences())
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := parseFlags(append([]string{"--web.listen=127.0.0.1:8080"}, tt.args...))
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
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
