package app

import (
	"slices"
	"strings"
	"testing"

	flag "github.com/spf13/pflag"
)

// concern is one options type as the server registers and validates it.
type concern interface {
	addFlags(*flag.FlagSet)
	validate() error
}

// authnConcern validates --authn.* against a fixed --web.listen and TLS options.
type authnConcern struct {
	authnOptions
	listen string
	tls    tlsOptions
}

func (c *authnConcern) validate() error { return c.authnOptions.validate(c.listen, c.tls) }

// TestOptionsValidate checks each concern's flags on their own: no other concern is
// registered, so each is testable without the others.
func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name    string
		concern func() concern
		args    []string
		wantErr string // "" for valid
	}{
		{"decision defaults", func() concern { return &decisionOptions{} }, nil, ""},
		{"decision bad mapping", func() concern { return &decisionOptions{} }, []string{"--openshift.mappings=x"}, `--openshift.mappings: mapping "x"`},
		{"decision empty tenant label", func() concern { return &decisionOptions{} }, []string{"--tenant.label="}, "--tenant.label must not be empty"},
		{"decision zero review timeout", func() concern { return &decisionOptions{} }, []string{"--review.timeout=0"}, "--review.timeout must be positive"},
		{"informer negative not-found TTL", func() concern { return &informerOptions{} }, []string{"--informer.not-found-ttl=-1s"}, "--informer.not-found-ttl must not be negative"},
		{"cache defaults", func() concern { return &cacheOptions{} }, nil, ""},
		{"cache negative TTL", func() concern { return &cacheOptions{} }, []string{"--cache.allowed-ttl=-1s"}, "--cache.allowed-ttl and --cache.denied-ttl must not be negative"},
		{"cache size", func() concern { return &cacheOptions{} }, []string{"--cache.size=0"}, "--cache.size must be at least 1"},
		{"cache negative in-flight", func() concern { return &cacheOptions{} }, []string{"--review.max-in-flight=-1"}, errNegativeLimits.Error()},
		{"memcached unsigned", func() concern { return &cacheOptions{} }, []string{"--memcached=mc:1"}, "--memcached needs --memcached.hmac-key-file"},
		{"memcached negative expire", func() concern { return &cacheOptions{} }, []string{"--memcached=mc:1", "--memcached.insecure-unsigned", "--memcached.expire=-1"}, "--memcached.expire and --memcached.interval must not be negative"},
		{"memcached zero timeout", func() concern { return &cacheOptions{} }, []string{"--memcached.timeout=0"}, "--memcached.timeout must be positive"},
		{"cache negative front TTL", func() concern { return &cacheOptions{} }, []string{"--cache.front-ttl=-1s"}, "--cache.front-ttl must not be negative"},
		{"web defaults", func() concern { return &webOptions{} }, nil, ""},
		{"web negative delay", func() concern { return &webOptions{} }, []string{"--web.shutdown-delay=-1s"}, errNegativeLimits.Error()},
		{"web zero body", func() concern { return &webOptions{} }, []string{"--web.max-body-bytes=0"}, "--web.max-body-bytes must be positive"},
		{"tls defaults", func() concern { return &tlsOptions{} }, nil, ""},
		{"tls key without cert", func() concern { return &tlsOptions{} }, []string{"--tls.internal.server.key-file=k"}, "--tls.internal.server.cert-file and --tls.internal.server.key-file go together"},
		{"tls version", func() concern { return &tlsOptions{} }, []string{"--tls.min-version=VersionTLS11"}, "--tls.min-version"},
		{"authn token by default", func() concern { return &authnConcern{listen: ":8080"} }, nil, ""},
		{"authn none off loopback", func() concern { return &authnConcern{listen: ":8080"} }, []string{"--authn.mode=none"}, "would answer any caller"},
		{"authn mtls with certificates", func() concern {
			return &authnConcern{listen: ":8080", tls: tlsOptions{certFile: "c", keyFile: "k", clientCAFile: "ca"}}
		}, []string{"--authn.mode=mtls"}, ""},
		{"openshift defaults", func() concern { return &openshiftOptions{} }, nil, ""},
		{"openshift bad rule", func() concern { return &openshiftOptions{} }, []string{"--opa.rule=a.b"}, `--opa.rule "a.b" is not a Rego rule name`},
		{"openshift ssar without package", func() concern { return &openshiftOptions{} }, []string{"--opa.ssar"}, "need --opa.package"},
		{"openshift migration needs both matchers", func() concern { return &openshiftOptions{} }, []string{"--opa.package=p", "--opa.matcher=k8s_namespace_name", "--opa.viaq-to-otel-migration"}, "--opa.viaq-to-otel-migration needs"},
		{"openshift zero selector namespaces", func() concern { return &openshiftOptions{} }, []string{"--opa.max-selector-namespaces=0"}, "--opa.max-selector-namespaces must be at least 1"},
		{"interlink off", func() concern { return &interlinkConfig{} }, nil, ""},
		{"VK field managers, repeated and listed", func() concern { return &decisionOptions{tenantLabel: "l", reviewTimeout: 1, reloadInterval: 1} }, []string{"--interlink.vk-field-managers=vk,my-vk", "--interlink.vk-field-managers=x"}, ""},
		{"no VK field manager", func() concern { return &decisionOptions{} }, []string{"--interlink.vk-field-managers="}, ""},
		{"empty VK field manager", func() concern { return &decisionOptions{} }, []string{"--interlink.vk-field-managers=vk,,x"}, "--interlink.vk-field-managers: empty field manager name"},
		{"interlink plugin without listen", func() concern { return &interlinkConfig{} }, []string{"--interlink.plugin-url=http://p"}, "--interlink.plugin-url needs --interlink.listen"},
		{"admission bad identity", func() concern { return &admissionConfig{} }, []string{"--admission.identity=x"}, "--admission.identity"},
		{"hub off", func() concern { return &hubOptions{} }, nil, ""},
		{"hub without a cluster name", func() concern { return &hubOptions{} }, []string{"--tenants.kubeconfig=/hub"}, "--tenants.kubeconfig needs --tenants.cluster-name"},
		{"hub member", func() concern { return &hubOptions{} }, []string{"--tenants.kubeconfig=/hub", "--tenants.cluster-name=site-b"}, ""},
		{"hub itself a member", func() concern { return &hubOptions{} }, []string{"--tenants.cluster-name=a"}, ""},
		{"hub bad cluster name", func() concern { return &hubOptions{} }, []string{"--tenants.kubeconfig=/hub", "--tenants.cluster-name=Site_B"}, `--tenants.cluster-name "Site_B" is not a DNS-1123 label`},
		{"admission zero timeout", func() concern { return &admissionConfig{} }, []string{"--admission.timeout=0"}, "--admission.timeout must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.concern()
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			c.addFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			err := c.validate()
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("validate() = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

// TestSubcommandsShareServeFlags: every flag `check` and `who-can` share with the server
// is registered by the server's own decisionOptions.
func TestSubcommandsShareServeFlags(t *testing.T) {
	var o serveOptions
	serve := newServeFlagSet(&o)
	var d decisionOptions
	shared := flag.NewFlagSet("decision", flag.ContinueOnError)
	d.addFlags(shared)
	shared.VisitAll(func(f *flag.Flag) {
		if g := serve.Lookup(f.Name); g == nil || g.Usage != f.Usage || g.DefValue != f.DefValue {
			t.Errorf("--%s differs between the server and the admin commands", f.Name)
		}
	})
}

// TestVKFieldManagers: by default the names the API server gives interLink's Virtual
// Kubelet (its binary's, in the image and in the release archives); repeated flags add up.
func TestVKFieldManagers(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want []string
	}{
		{nil, []string{"vk", "virtual-kubelet"}},
		{[]string{"--interlink.vk-field-managers=a,b", "--interlink.vk-field-managers=c"}, []string{"a", "b", "c"}},
		{[]string{"--interlink.vk-field-managers="}, []string{}},
	} {
		var c decisionOptions
		fs := flag.NewFlagSet("test", flag.ContinueOnError)
		c.addFlags(fs)
		if err := fs.Parse(tt.args); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(c.vkManagers, tt.want) {
			t.Errorf("%v: %q, want %q", tt.args, c.vkManagers, tt.want)
		}
	}
}
