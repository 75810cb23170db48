package app

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/go-kit/log"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestParseMemcachedFlags(t *testing.T) {
	loopback := "--web.listen=127.0.0.1:8080"
	tests := []struct {
		name    string
		args    []string
		wantErr string
		want    memcachedSecurity
	}{
		{name: "no memcached, no key", args: []string{loopback}},
		{name: "memcached without a key is refused", args: []string{loopback, "--memcached=mc:11211"},
			wantErr: "--memcached needs --memcached.hmac-key-file: memcached has no authentication"},
		{name: "the refusal says how to make a key", args: []string{loopback, "--memcached=mc:11211"},
			wantErr: "kubectl -n sar-bridge create secret generic sar-bridge-memcached-hmac --from-literal=hmac.key=$(openssl rand -hex 32)"},
		{name: "memcached with a key", args: []string{loopback, "--memcached=mc:11211", "--memcached.hmac-key-file=/k"},
			want: memcachedSecurity{hmacKeyFile: "/k"}},
		{name: "memcached unsigned when insisted", args: []string{loopback, "--memcached=mc:11211", "--memcached.insecure-unsigned"},
			want: memcachedSecurity{insecureUnsigned: true}},
		{name: "cluster id override", args: []string{loopback, "--memcached=mc:11211", "--memcached.hmac-key-file=/k", "--memcached.cluster-id=c1"},
			want: memcachedSecurity{hmacKeyFile: "/k", clusterID: "c1"}},
		{name: "key and unsigned", args: []string{loopback, "--memcached=mc:11211", "--memcached.hmac-key-file=/k", "--memcached.insecure-unsigned"},
			wantErr: "exclude each other"},
		{name: "key without memcached", args: []string{loopback, "--memcached.hmac-key-file=/k"}, wantErr: "need --memcached"},
		{name: "cluster id without memcached", args: []string{loopback, "--memcached.cluster-id=c1"}, wantErr: "need --memcached"},
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
			if cfg.cache.memcachedSecurity != tt.want {
				t.Errorf("memcached security = %+v, want %+v", cfg.cache.memcachedSecurity, tt.want)
			}
		})
	}
}

func TestClusterIdentity(t *testing.T) {
	kubeSystem := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system", UID: types.UID("5b0e6f7c-uid")}}
	gr := schema.GroupResource{Resource: "namespaces"}
	tests := []struct {
		name     string
		objects  []runtime.Object
		failures []error // returned by the first Gets, in order
		override string
		want     string
		wantErr  string
	}{
		{name: "kube-system UID", objects: []runtime.Object{kubeSystem}, want: "5b0e6f7c-uid"},
		{name: "override wins, no API call", override: "edge-1", failures: []error{errors.New("must not be called")}, want: "edge-1"},
		{name: "transient errors are retried", objects: []runtime.Object{kubeSystem},
			failures: []error{errors.New("connection refused"), apierrors.NewServiceUnavailable("starting")}, want: "5b0e6f7c-uid"},
		{name: "forbidden stops at once", failures: []error{apierrors.NewForbidden(gr, "kube-system", errors.New("no"))},
			wantErr: "the bridge needs get on namespaces, or pass --memcached.cluster-id"},
		{name: "no kube-system", wantErr: `namespaces "kube-system" not found`},
		{name: "no UID", objects: []runtime.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system"}}}, wantErr: "has no UID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset(tt.objects...)
			calls := 0
			client.PrependReactor("get", "namespaces", func(k8stesting.Action) (bool, runtime.Object, error) {
				calls++
				if calls <= len(tt.failures) {
					return true, nil, tt.failures[calls-1]
				}
				return false, nil, nil
			})
			got, err := clusterIdentity(context.Background(), client, tt.override, log.NewNopLogger())
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("clusterIdentity = %q, %v; want %q", got, err, tt.want)
			}
			if tt.override != "" && calls != 0 {
				t.Errorf("%d API calls with an override, want 0", calls)
			}
		})
	}
}
