package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sar-bridge/sar-bridge/internal/authorizer"
	"github.com/sar-bridge/sar-bridge/internal/cache"
	"github.com/sar-bridge/sar-bridge/test/cluster"
)

var (
	memcachedForged      = map[string]string{"tier": "memcached", "result": "forged"}
	hmacKeyReloadsOK     = map[string]string{"result": "success"}
	hmacKeyReloadsTotal  = "sar_bridge_memcached_hmac_keys_reloads_total"
	suiteKeyFileOnce     sync.Once
	suiteKeyFile         string
	suiteKeyFileErr      error
	suiteKeyFileContents []byte
)

// newHMACKey returns a fresh 32-byte key.
func newHMACKey(t *testing.T) []byte {
	t.Helper()
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

// writeKeyFile writes keys (the first signs) as a Secret update would: the whole file
// at once, by a rename.
func writeKeyFile(t *testing.T, path string, keys ...[]byte) {
	t.Helper()
	var b strings.Builder
	b.WriteString("# sar-bridge memcached HMAC keys: the first signs, all verify\n")
	for _, k := range keys {
		b.WriteString(hex.EncodeToString(k) + "\n")
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// memcachedArgs are the flags of a bridge sharing mc, signing with the suite's key.
func memcachedArgs(t *testing.T, mc *cluster.Memcached, extra ...string) []string {
	t.Helper()
	suiteKeyFileOnce.Do(func() {
		suiteKeyFile = filepath.Join(suite.workDir, "memcached-hmac.key")
		k := make([]byte, 32)
		if _, suiteKeyFileErr = rand.Read(k); suiteKeyFileErr != nil {
			return
		}
		suiteKeyFileContents = []byte(hex.EncodeToString(k) + "\n")
		suiteKeyFileErr = os.WriteFile(suiteKeyFile, suiteKeyFileContents, 0o600)
	})
	if suiteKeyFileErr != nil {
		t.Fatal(suiteKeyFileErr)
	}
	return append([]string{"--memcached=" + mc.Addr, "--memcached.hmac-key-file=" + suiteKeyFile}, extra...)
}

func startTestMemcached(t *testing.T) *cluster.Memcached {
	t.Helper()
	mc, err := cluster.StartMemcached(filepath.Join(t.TempDir(), "memcached.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mc.Stop)
	return mc
}

// kubeSystemUID is the cluster identity a bridge uses by default.
func kubeSystemUID(t *testing.T) string {
	t.Helper()
	ns, err := suite.cluster.Client.CoreV1().Namespaces().Get(context.Background(), metav1.NamespaceSystem, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return string(ns.UID)
}

// createReviewKey is the cache key of the review the bridge sends for a pod create by
// ServiceAccount ns/name. Were the spec here to drift from the bridge's, the forged
// counter below would not move and the test would fail rather than pass for the wrong
// reason.
func createReviewKey(t *testing.T, ns, name string) string {
	t.Helper()
	key, err := authorizer.ReviewKey(authorizationv1.SubjectAccessReviewSpec{
		User:   cluster.ServiceAccountUser(ns, name),
		Groups: cluster.ServiceAccountGroups(ns),
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: ns, Verb: "create", Group: "interlink.io", Resource: "pods",
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// storeReview writes an allowed review straight into memcached, as anyone who can reach
// it could, sealed with keys (nil: unsigned).
func storeReview(t *testing.T, mc *cluster.Memcached, keys *cache.Keyring, clusterID, key, reason string) {
	t.Helper()
	value := fmt.Sprintf(`{"v":1,"a":true,"r":%q}`, reason)
	now := time.Now()
	sealed := cache.SealValue(keys, clusterID, key, []byte(value), now, now.Add(time.Hour))
	raw := memcache.New(mc.Addr)
	defer raw.Close()
	if err := raw.Set(&memcache.Item{Key: cache.MemcachedKey(clusterID, key), Value: sealed, Expiration: 3600}); err != nil {
		t.Fatalf("writing into memcached: %v", err)
	}
}

// A forged "allowed" review, written into memcached under the exact key the bridge reads,
// for a ServiceAccount RBAC denies: the bridge still denies (a live review), counts the
// forgery, and its live answer replaces the forged value. The same value signed with
// the bridge's key is honoured, so the key and format above are the bridge's own.
func TestMemcachedForgedReviewIsDenied(t *testing.T) {
	mc := startTestMemcached(t)
	a := newBridge(t, memcachedArgs(t, mc, "--cache.front-ttl=1s")...)
	uid := kubeSystemUID(t)

	attacker, err := cache.NewKeyring(newHMACKey(t))
	if err != nil {
		t.Fatal(err)
	}
	forgedIn := input("create", newPod("team-a", "mc-forger", "forged-1"))
	denied := deny(mayNot(sa("team-a", "mc-forger"), "create", "pods.interlink.io", "team-a")...)
	variants := []struct {
		name string
		keys *cache.Keyring
	}{{"signed with another key", attacker}, {"unsigned", nil}}
	for i, v := range variants {
		storeReview(t, mc, v.keys, uid, createReviewKey(t, "team-a", "mc-forger"), "forged: "+v.name)
		reviews := metric(t, a, reviewsTotal, nil)
		// A fresh pod name each time: create reviews carry none, the key is the same,
		// and the front tier of A was not filled by an earlier answer for this key.
		if i > 0 {
			time.Sleep(1100 * time.Millisecond) // --cache.front-ttl=1s
		}
		decide(t, a, forgedIn, denied)
		if got := metric(t, a, cacheTierTotal, memcachedForged); got != float64(i+1) {
			t.Errorf("%s: %s%v = %v, want %d", v.name, cacheTierTotal, memcachedForged, got, i+1)
		}
		if got := metric(t, a, reviewsTotal, nil); got != reviews+1 {
			t.Errorf("%s: %s %v -> %v, want one live review", v.name, reviewsTotal, reviews, got)
		}
	}
	if got := metric(t, a, cacheTierTotal, memcachedHit); got != 0 {
		t.Errorf("memcached hits = %v, want 0", got)
	}
	if n := strings.Count(a.Log(), "failed HMAC verification"); n != 1 {
		t.Errorf("%d log lines about forged values, want 1 (rate limited)", n)
	}

	// The live denial replaced the forgery: another replica reads it as a hit.
	b := newBridge(t, memcachedArgs(t, mc)...)
	decide(t, b, forgedIn, denied)
	if got := metric(t, b, reviewsTotal, nil); got != 0 {
		t.Errorf("replica B sent %v reviews, want 0: the genuine denial is in memcached", got)
	}
	if got := metric(t, b, cacheTierTotal, memcachedForged); got != 0 {
		t.Errorf("replica B: forged = %v, want 0", got)
	}

	// Control: the bridge's own key makes the same kind of write an answer.
	own, err := cache.ParseKeys(suiteKeyFileContents)
	if err != nil {
		t.Fatal(err)
	}
	storeReview(t, mc, own, uid, createReviewKey(t, "team-a", "mc-keyholder"), "written by the key holder")
	r := decide(t, a, input("create", newPod("team-a", "mc-keyholder", "k-1")), allow())
	if !strings.Contains(r.Reason(), "written by the key holder") {
		t.Errorf("reason %q: want the stored review's", r.Reason())
	}
}

// Rotation without downtime across two replicas whose Secrets update at different
// times: add the new key second, make it first, remove the old. At every step each
// replica reads what the other wrote, and nothing is counted as forged.
func TestMemcachedKeyRotation(t *testing.T) {
	mc := startTestMemcached(t)
	dir := t.TempDir()
	oldKey, newKey := newHMACKey(t), newHMACKey(t)
	fileA, fileB := filepath.Join(dir, "a.key"), filepath.Join(dir, "b.key")
	writeKeyFile(t, fileA, oldKey)
	writeKeyFile(t, fileB, oldKey)
	flags := func(file string) []string {
		return []string{"--memcached=" + mc.Addr, "--memcached.hmac-key-file=" + file, "--reload.interval=200ms", "--cache.front-ttl=1s"}
	}
	a := newBridge(t, flags(fileA)...)
	b := newBridge(t, flags(fileB)...)
	replicas := []struct {
		name string
		b    *cluster.Bridge
		file string
	}{{"A", a, fileA}, {"B", b, fileB}}

	// shared checks that a review each replica stores is a memcached hit on the other.
	n := 0
	shared := func(step string) {
		t.Helper()
		for _, w := range replicas {
			r := replicas[1]
			if w.name == "B" {
				r = replicas[0]
			}
			n++
			in := input("status", newPod("team-a", "runner", fmt.Sprintf("rotation-%d", n)))
			decide(t, w.b, in, allow(`RoleBinding "offload/team-a"`))
			reviews, hits := metric(t, r.b, reviewsTotal, nil), metric(t, r.b, cacheTierTotal, memcachedHit)
			decide(t, r.b, in, allow(`RoleBinding "offload/team-a"`))
			if got := metric(t, r.b, cacheTierTotal, memcachedHit); got != hits+1 {
				t.Errorf("%s: %s wrote, %s read: memcached hits %v -> %v, want +1", step, w.name, r.name, hits, got)
			}
			if got := metric(t, r.b, reviewsTotal, nil); got != reviews {
				t.Errorf("%s: %s wrote, %s read: %s %v -> %v, want no review", step, w.name, r.name, reviewsTotal, reviews, got)
			}
		}
		for _, r := range replicas {
			if got := metric(t, r.b, cacheTierTotal, memcachedForged); got != 0 {
				t.Errorf("%s: replica %s counted %v forged values, want 0", step, r.name, got)
			}
		}
	}
	// rotate rewrites one replica's key file and waits until it has reloaded it.
	rotate := func(replica int, keys ...[]byte) {
		t.Helper()
		r := replicas[replica]
		before := metric(t, r.b, hmacKeyReloadsTotal, hmacKeyReloadsOK)
		writeKeyFile(t, r.file, keys...)
		if _, ok := poll(10*time.Second, 100*time.Millisecond, func() bool {
			return metric(t, r.b, hmacKeyReloadsTotal, hmacKeyReloadsOK) > before
		}); !ok {
			t.Fatalf("replica %s did not reload its key file", r.name)
		}
	}

	shared("old key only")
	rotate(0, oldKey, newKey)
	shared("A also verifies with the new key")
	rotate(1, oldKey, newKey)
	shared("both verify with the new key")
	rotate(0, newKey, oldKey)
	shared("A signs with the new key")
	rotate(1, newKey, oldKey)
	shared("both sign with the new key")
	rotate(0, newKey)
	rotate(1, newKey)
	shared("old key removed")
	if t.Failed() {
		return
	}

	// A replica left with the old key only finds nothing it can trust.
	staleFile := filepath.Join(dir, "stale.key")
	writeKeyFile(t, staleFile, oldKey)
	stale := newBridge(t, flags(staleFile)...)
	in := input("status", newPod("team-a", "runner", "rotation-stale"))
	decide(t, a, in, allow(`RoleBinding "offload/team-a"`))
	decide(t, stale, in, allow(`RoleBinding "offload/team-a"`))
	if got := metric(t, stale, cacheTierTotal, memcachedForged); got != 1 {
		t.Errorf("replica with the removed key only: forged = %v, want 1", got)
	}
	if got := metric(t, stale, reviewsTotal, nil); got != 1 {
		t.Errorf("replica with the removed key only: %s = %v, want 1 (a live review)", reviewsTotal, got)
	}
}

// Bridges of two clusters (two identities) sharing one memcached and one key never
// answer from each other's entries; a bridge with the same identity does.
func TestMemcachedClusterIdentity(t *testing.T) {
	mc := startTestMemcached(t)
	a := newBridge(t, memcachedArgs(t, mc)...) // identity: the kube-system UID
	other := newBridge(t, memcachedArgs(t, mc, "--memcached.cluster-id=another-cluster")...)
	same := newBridge(t, memcachedArgs(t, mc, "--memcached.cluster-id="+kubeSystemUID(t))...)

	cases := []struct {
		in   map[string]any
		want want
	}{
		{input("create", newPod("team-a", "runner", "cid-1")), allow(`RoleBinding "offload/team-a"`)},
		{input("create", newPod("team-a", "cid-stranger", "cid-2")), deny(mayNot(sa("team-a", "cid-stranger"), "create", "pods.interlink.io", "team-a")...)},
	}
	for _, c := range cases {
		decide(t, a, c.in, c.want)
		decide(t, other, c.in, c.want)
		decide(t, same, c.in, c.want)
	}
	for _, r := range []struct {
		name          string
		b             *cluster.Bridge
		reviews, hits float64
	}{
		{name: "cluster A", b: a, reviews: 2},
		{name: "another cluster", b: other, reviews: 2},
		{name: "cluster A, identity given", b: same, reviews: 0, hits: 2},
	} {
		if got := metric(t, r.b, reviewsTotal, nil); got != r.reviews {
			t.Errorf("%s: %s = %v, want %v", r.name, reviewsTotal, got, r.reviews)
		}
		if got := metric(t, r.b, cacheTierTotal, memcachedHit); got != r.hits {
			t.Errorf("%s: memcached hits = %v, want %v", r.name, got, r.hits)
		}
		if got := metric(t, r.b, cacheTierTotal, memcachedForged); got != 0 {
			t.Errorf("%s: forged = %v, want 0", r.name, got)
		}
	}
}

// Without a key the bridge refuses memcached, saying why and how to make one.
func TestMemcachedWithoutKeyRefused(t *testing.T) {
	mc := startTestMemcached(t)
	b, err := startBridge("memcached-without-key", baseArgs("--memcached="+mc.Addr)...)
	if err == nil {
		b.Stop()
		t.Fatal("the bridge started with --memcached and no --memcached.hmac-key-file")
	}
	if b == nil {
		t.Fatalf("starting: %v", err)
	}
	for _, s := range []string{"--memcached needs --memcached.hmac-key-file", "openssl rand -hex 32", "--memcached.insecure-unsigned"} {
		if !strings.Contains(b.Log(), s) {
			t.Errorf("the refusal lacks %q:\n%s", s, tail(b.Log(), 20))
		}
	}
}

// manifests/memcached mounts the key Secret (whole, so updates reach the file), points
// --memcached.hmac-key-file into it, admits only the bridge to memcached, and passes the
// API server's validation.
func TestManifestsMemcachedOverlay(t *testing.T) {
	objs, err := cluster.Render(filepath.Join(suite.root, "manifests", "memcached"))
	if err != nil {
		t.Fatal(err)
	}
	if err := suite.cluster.DryRunApply(context.Background(), objs); err != nil {
		t.Fatal(err)
	}
	d := find[appsv1.Deployment](t, objs, "Deployment", "sar-bridge")
	c := d.Spec.Template.Spec.Containers[0]
	var keyFile string
	hasMemcached := false
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--memcached.hmac-key-file="); ok {
			keyFile = v
		}
		hasMemcached = hasMemcached || strings.HasPrefix(a, "--memcached=sar-bridge-memcached.sar-bridge.svc:")
	}
	if !hasMemcached || keyFile == "" {
		t.Fatalf("args %q: want --memcached=sar-bridge-memcached.sar-bridge.svc:... and --memcached.hmac-key-file", c.Args)
	}
	var mount *corev1.VolumeMount
	for i, m := range c.VolumeMounts {
		if filepath.Dir(keyFile) == m.MountPath {
			mount = &c.VolumeMounts[i]
		}
	}
	if mount == nil || mount.SubPath != "" || !mount.ReadOnly {
		t.Fatalf("key file %s: want it in a read-only volume mount without subPath, got %+v", keyFile, c.VolumeMounts)
	}
	var secret string
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == mount.Name && v.Secret != nil {
			secret = v.Secret.SecretName
		}
	}
	if secret != "sar-bridge-memcached-hmac" {
		t.Errorf("volume %s: Secret %q, want sar-bridge-memcached-hmac", mount.Name, secret)
	}
	np := find[networkingv1.NetworkPolicy](t, objs, "NetworkPolicy", "sar-bridge-memcached")
	if len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].From) != 1 ||
		np.Spec.Ingress[0].From[0].PodSelector.MatchLabels["app.kubernetes.io/component"] != "decision-service" {
		t.Errorf("NetworkPolicy ingress %+v: want the bridge's pods only", np.Spec.Ingress)
	}
}
