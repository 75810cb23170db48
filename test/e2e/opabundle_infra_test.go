package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sar-bridge/sar-bridge/test/cluster"
)

// The OPA bundle test infrastructure: a real CNCF distribution registry, bundles built and
// signed by the real `opa build`, pushed as OCI artifacts, and pulled by the real
// `opa run --server`. TestOPABundleInfra proves the pieces against OPA itself; the
// helpers here are for the tests of sar-bridge's own bundle pulling.

// opaTools holds the opa CLI and the registry, found or built once.
var opaTools struct {
	once          sync.Once
	opa, registry string
	err           error
}

// opaBundleTools returns the opa CLI ($SAR_BRIDGE_OPA or hack/opa.sh) and the registry
// ($SAR_BRIDGE_REGISTRY or hack/registry.sh); the scripts build them on first use.
func opaBundleTools(t *testing.T) (opa, registry string) {
	t.Helper()
	opaTools.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
		if opaTools.opa, opaTools.err = cluster.OPABinary(ctx, suite.root); opaTools.err != nil {
			return
		}
		opaTools.registry, opaTools.err = cluster.RegistryBinary(ctx, suite.root)
	})
	if opaTools.err != nil {
		t.Fatalf("OPA bundle tools: %v", opaTools.err)
	}
	return opaTools.opa, opaTools.registry
}

// testWorkDir is a directory for t under the suite's work directory (kept with the logs
// when the suite fails or SAR_BRIDGE_E2E_KEEP=1).
func testWorkDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(suite.workDir, strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// startRegistry starts a registry with its storage and log under dir, stopped when the
// test ends; the tail of its log is printed if the test failed.
func startRegistry(t *testing.T, dir string) *cluster.Registry {
	t.Helper()
	_, bin := opaBundleTools(t)
	r, err := cluster.StartRegistry(bin, dir)
	if err != nil {
		t.Fatalf("starting the registry: %v", err)
	}
	t.Cleanup(func() {
		r.Stop()
		if t.Failed() {
			t.Logf("--- registry log %s ---\n%s", r.LogPath, tail(r.Log(), 60))
		}
	})
	return r
}

// startOPAServer starts `opa run --server` with config in dir, stopped when the test
// ends; the tail of its log is printed if the test failed.
func startOPAServer(t *testing.T, dir string, config cluster.OCIBundleConfig) *cluster.OPAServer {
	t.Helper()
	opa, _ := opaBundleTools(t)
	data, err := config.JSON()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "opa-config.json")
	if err := os.WriteFile(cfg, data, 0o644); err != nil {
		t.Fatal(err)
	}
	o, err := cluster.StartOPAServer(cluster.OPAServerOptions{Binary: opa, ConfigFile: cfg, Dir: dir})
	if err != nil {
		t.Fatalf("starting opa: %v", err)
	}
	t.Cleanup(func() {
		o.Stop()
		if t.Failed() {
			t.Logf("--- opa log %s ---\n%s", o.LogPath, tail(o.Log(), 80))
		}
	})
	return o
}

// writeBundleSource writes a bundle directory under dir: package interlink.authz whose
// decision is {"allowed": allowed, "revision": rev}, and a .manifest with the root
// interlink/authz and the revision "from-manifest" (which opa build's --revision
// overrides).
func writeBundleSource(t *testing.T, dir, rev string, allowed bool) string {
	t.Helper()
	src := filepath.Join(dir, "src-"+rev)
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	policy := fmt.Sprintf("package interlink.authz\n\ndecision := {\"allowed\": %t, \"revision\": %q}\n", allowed, rev)
	manifest := `{"revision": "from-manifest", "roots": ["interlink/authz"]}`
	if err := os.WriteFile(filepath.Join(src, "policy.rego"), []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, ".manifest"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	return src
}

// buildBundle runs opa build on src into dir/bundle-<rev>.tar.gz with --revision rev
// and returns the tarball.
func buildBundle(t *testing.T, dir, src, rev string, opts cluster.BuildOptions) []byte {
	t.Helper()
	opa, _ := opaBundleTools(t)
	out := filepath.Join(dir, "bundle-"+rev+".tar.gz")
	opts.Revision = rev
	if err := cluster.OPABuild(opa, src, out, opts); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// signedBy returns BuildOptions signing with k.
func signedBy(k *cluster.SigningKey) cluster.BuildOptions {
	return cluster.BuildOptions{SigningKey: k.PrivateKeyFile, SigningAlg: k.Algorithm}
}

// opaDecision is what the test bundles decide.
type opaDecision struct {
	Allowed  bool   `json:"allowed"`
	Revision string `json:"revision"`
}

// queryDecision asks o for data.interlink.authz.decision ("" revision: undefined).
func queryDecision(o *cluster.OPAServer) (opaDecision, error) {
	var d opaDecision
	raw, err := o.Query("interlink/authz/decision", map[string]any{})
	if err != nil || len(raw) == 0 {
		return d, err
	}
	err = json.Unmarshal(raw, &d)
	return d, err
}

// awaitRevision polls o until the decision comes from revision rev.
func awaitRevision(t *testing.T, o *cluster.OPAServer, rev string, within time.Duration) time.Duration {
	t.Helper()
	var last opaDecision
	var lastErr error
	took, ok := poll(within, 100*time.Millisecond, func() bool {
		last, lastErr = queryDecision(o)
		return lastErr == nil && last.Revision == rev && last.Allowed
	})
	if !ok {
		st, serr := o.BundleStatus("authz")
		t.Fatalf("opa did not decide from revision %q within %s: last decision %+v (error %v); bundle status %+v (error %v)",
			rev, within, last, lastErr, st, serr)
	}
	return took
}

// awaitBundleError polls o's bundle status until its message contains want.
func awaitBundleError(t *testing.T, o *cluster.OPAServer, want string, within time.Duration) *cluster.BundleStatus {
	t.Helper()
	var st *cluster.BundleStatus
	var err error
	if _, ok := poll(within, 100*time.Millisecond, func() bool {
		st, err = o.BundleStatus("authz")
		return err == nil && strings.Contains(st.Message+" "+joinRaw(st.Errors), want)
	}); !ok {
		t.Fatalf("opa's bundle status shows no error containing %q within %s: %+v (error %v)", want, within, st, err)
	}
	return st
}

// bundleFiles lists a bundle tarball's file names, sorted.
func bundleFiles(t *testing.T, tarball []byte) []string {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(tarball))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
	slices.Sort(names)
	return names
}

func joinRaw(rs []json.RawMessage) string {
	var b strings.Builder
	for _, r := range rs {
		b.Write(r)
		b.WriteByte(' ')
	}
	return b.String()
}

// TestOPABundleInfra proves the bundle test infrastructure with OPA itself: bundles built
// and signed by opa build, pushed to a real registry, pulled by opa run as an OCI bundle,
// updated under the same tag, a bundle signed with the wrong key refused, registry errors
// seen in OPA's status, and the persisted bundle served while the registry is down.
func TestOPABundleInfra(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := testWorkDir(t)
	opaBundleTools(t) // build (or find) both tools before anything starts

	reg := startRegistry(t, filepath.Join(dir, "registry"))
	// OPA reaches the registry through a fault proxy, to be shown HTTP errors later.
	fp, err := cluster.StartRegistryFaultProxy(reg.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fp.Close() })

	k1, err := cluster.GenerateSigningKey(dir, "k1", "RS256")
	if err != nil {
		t.Fatal(err)
	}
	other, err := cluster.GenerateSigningKey(dir, "other", "RS256")
	if err != nil {
		t.Fatal(err)
	}

	const repo, tag = "sar-bridge/authz", "v1"
	// push builds revision rev signed with opts and pushes it to repo:tag.
	push := func(rev string, opts cluster.BuildOptions) []byte {
		t.Helper()
		tarball := buildBundle(t, dir, writeBundleSource(t, dir, rev, true), rev, opts)
		digest, err := cluster.PushBundle(ctx, reg.Host, repo, tag, tarball)
		if err != nil {
			t.Fatalf("pushing %s: %v", rev, err)
		}
		got, mediaType, err := cluster.ResolveManifest(ctx, reg.Host, repo, tag)
		if err != nil || got != digest || mediaType != cluster.MediaTypeOCIManifest {
			t.Fatalf("%s:%s resolves to %s (%s, error %v), want %s (%s)", repo, tag, got, mediaType, err, digest, cluster.MediaTypeOCIManifest)
		}
		t.Logf("pushed %s: manifest %s, bundle layer %s (%d bytes)", rev, digest, cluster.Digest(tarball), len(tarball))
		return tarball
	}

	// r1, with extra claims in its signature.
	claims := filepath.Join(dir, "claims.json")
	if err := os.WriteFile(claims, []byte(`{"iss": "sar-bridge-e2e"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	r1opts := signedBy(k1)
	r1opts.ClaimsFile = claims
	r1 := push("r1", r1opts)
	// Named from the bundle's root, signed, with the manifest opa build rewrote.
	if files := bundleFiles(t, r1); !slices.Equal(files, []string{"/.manifest", "/.signatures.json", "/data.json", "/policy.rego"}) {
		t.Fatalf("r1's files: %q", files)
	}

	persistDir := filepath.Join(dir, "opa-persist")
	config := cluster.OCIBundleConfig{
		RegistryHost:         fp.Host,
		Repository:           repo,
		Tag:                  tag,
		Key:                  k1,
		Persist:              true,
		PersistenceDirectory: persistDir,
		StatusConsole:        true,
	}
	opa := startOPAServer(t, filepath.Join(dir, "opa-1"), config)
	took := awaitRevision(t, opa, "r1", 30*time.Second)
	t.Logf("opa decides from r1 %s after its start", took.Round(time.Millisecond))
	// Health and status follow the activation by a moment: OPA decides from the new
	// store before its bundle plugin reports it (CI once saw /health?bundles answer 500
	// "one or more bundles are not activated" just after the first decision from r1).
	var code int
	var body []byte
	if _, ok := poll(10*time.Second, 50*time.Millisecond, func() bool {
		code, body, err = opa.Get("/health?bundles")
		return err == nil && code == http.StatusOK
	}); !ok {
		t.Fatalf("GET /health?bundles: %d %s (error %v)", code, body, err)
	}
	var active *cluster.BundleStatus
	if _, ok := poll(10*time.Second, 50*time.Millisecond, func() bool {
		active, err = opa.BundleStatus("authz")
		return err == nil && active.ActiveRevision == "r1" && active.Code == ""
	}); !ok {
		t.Fatalf("bundle status after r1: %+v (error %v), want active_revision r1 and no error", active, err)
	}

	// r2 under the same tag.
	r2 := push("r2", signedBy(k1))
	took = awaitRevision(t, opa, "r2", 30*time.Second)
	t.Logf("opa decides from r2 %s after the push", took.Round(time.Millisecond))

	// OPA persisted the activated bundle as pulled: the very tarball pushed.
	persisted := filepath.Join(persistDir, "bundles", "authz", "bundle.tar.gz")
	if data, err := os.ReadFile(persisted); err != nil || !bytes.Equal(data, r2) {
		t.Fatalf("persisted bundle %s: %d bytes (error %v), want r2's tarball (%d bytes)", persisted, len(data), err, len(r2))
	}
	if _, err := os.Stat(filepath.Join(persistDir, "oci", "blobs", "sha256", strings.TrimPrefix(cluster.Digest(r2), "sha256:"))); err != nil {
		t.Fatalf("OPA's OCI store holds no r2 layer: %v", err)
	}

	// r3, signed with a key OPA does not trust: refused, r2 stays active.
	push("r3", signedBy(other))
	st := awaitBundleError(t, opa, "verif", 30*time.Second)
	t.Logf("r3 (wrong key) refused: code %q, message %q", st.Code, st.Message)
	time.Sleep(3 * time.Second) // at least one more polling round
	if d, err := queryDecision(opa); err != nil || d.Revision != "r2" {
		t.Fatalf("after the wrongly signed r3: decision %+v (error %v), want r2's", d, err)
	}
	if st, err := opa.BundleStatus("authz"); err != nil || st.ActiveRevision != "r2" {
		t.Fatalf("after the wrongly signed r3: bundle status %+v (error %v), want active_revision r2", st, err)
	}

	// The registry answers 503 to manifest requests: OPA reports it and keeps r2.
	fp.SetRule(func(r *http.Request) int {
		if strings.Contains(r.URL.Path, "/manifests/") {
			return http.StatusServiceUnavailable
		}
		return 0
	})
	st = awaitBundleError(t, opa, "503", 30*time.Second)
	t.Logf("registry 503 seen: %q (%d requests faulted)", st.Message, fp.Faulted())
	if d, err := queryDecision(opa); err != nil || d.Revision != "r2" {
		t.Fatalf("while the registry fails: decision %+v (error %v), want r2's", d, err)
	}
	fp.SetRule(nil)

	// The registry goes away and OPA restarts: it decides from its persisted bundle.
	reg.Stop()
	opa.Stop()
	opa = startOPAServer(t, filepath.Join(dir, "opa-2"), config)
	took = awaitRevision(t, opa, "r2", 30*time.Second)
	t.Logf("restarted opa decides from the persisted r2 %s after its start, registry down", took.Round(time.Millisecond))
	st = awaitBundleError(t, opa, "502", 30*time.Second) // the proxy's answer for a dead upstream
	t.Logf("registry down seen: %q", st.Message)

	// The registry comes back on the same port with its storage: r3 is still the tag's
	// manifest, and a new, well-signed push is picked up.
	if err := reg.Restart(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := cluster.ResolveManifest(ctx, reg.Host, repo, tag); err != nil {
		t.Fatalf("after the registry's restart: %v", err)
	}
	push("r4", signedBy(k1))
	took = awaitRevision(t, opa, "r4", 30*time.Second)
	t.Logf("opa decides from r4 %s after the push to the restarted registry", took.Round(time.Millisecond))

	// The manifest is deleted, and with it the tag: OPA gets 404 and keeps r4.
	digest, _, err := cluster.ResolveManifest(ctx, reg.Host, repo, tag)
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.DeleteManifest(ctx, reg.Host, repo, digest); err != nil {
		t.Fatal(err)
	}
	if _, _, err := cluster.ResolveManifest(ctx, reg.Host, repo, tag); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("after deleting %s, %s:%s resolves (error %v), want 404", digest, repo, tag, err)
	}
	st = awaitBundleError(t, opa, "404", 30*time.Second)
	t.Logf("tag deleted seen: %q", st.Message)
	if d, err := queryDecision(opa); err != nil || d.Revision != "r4" {
		t.Fatalf("after the tag's deletion: decision %+v (error %v), want r4's", d, err)
	}
}

// TestOPABundleInfraES256 checks GenerateSigningKey's ECDSA keys with opa build's own
// verification: a bundle signed with ES256 verifies with its public key and not with
// another's.
func TestOPABundleInfraES256(t *testing.T) {
	dir := testWorkDir(t)
	opa, _ := opaBundleTools(t)
	k, err := cluster.GenerateSigningKey(dir, "es", "ES256")
	if err != nil {
		t.Fatal(err)
	}
	other, err := cluster.GenerateSigningKey(dir, "es-other", "ES256")
	if err != nil {
		t.Fatal(err)
	}
	buildBundle(t, dir, writeBundleSource(t, dir, "es1", true), "es1", signedBy(k))
	signed := filepath.Join(dir, "bundle-es1.tar.gz")
	verify := func(pub *cluster.SigningKey) error {
		return cluster.OPABuild(opa, signed, filepath.Join(dir, "verified.tar.gz"), cluster.BuildOptions{
			SigningAlg: "ES256",
			Args:       []string{"--verification-key", pub.PublicKeyFile},
		})
	}
	if err := verify(k); err != nil {
		t.Fatalf("the ES256 bundle does not verify with its key: %v", err)
	}
	if err := verify(other); err == nil || !strings.Contains(err.Error(), "failed to verify JWT signature") {
		t.Fatalf("the ES256 bundle verified with another key: want a signature error, got %v", err)
	}
}
