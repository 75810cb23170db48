package cluster

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// EnvOPA points at the opa CLI; when unset, hack/opa.sh builds it once into the cache
// (the OPA version go.mod pins) and prints its path.
const EnvOPA = "SAR_BRIDGE_OPA"

// OPABinary returns the path of the opa CLI: $SAR_BRIDGE_OPA or what hack/opa.sh prints.
func OPABinary(ctx context.Context, root string) (string, error) {
	return hackBinary(ctx, root, EnvOPA, "opa.sh")
}

// BuildOptions are the optional flags of OPABuild.
type BuildOptions struct {
	// Revision is passed as --revision (it overrides the .manifest's revision).
	Revision string
	// SigningKey is a PEM file of the private key (--signing-key): the bundle gets a
	// .signatures.json.
	SigningKey string
	// SigningAlg is --signing-alg (opa's default is RS256), e.g. ES256.
	SigningAlg string
	// ClaimsFile is a JSON file of extra claims for the signature (--claims-file).
	ClaimsFile string
	// Args are further flags, placed before the source directory.
	Args []string
}

// OPABuild runs the real `opa build -b srcDir -o outFile` with opts: srcDir is a bundle
// directory (policies, data.json files and an optional .manifest), or a bundle tarball
// (to verify its signature with opts.Args --verification-key), outFile the bundle
// tarball (.tar.gz). opa build runs inside srcDir on ".", so the bundle's files are
// named from the bundle's root (/policy.rego), not after srcDir's path.
func OPABuild(opaBinary, srcDir, outFile string, opts BuildOptions) error {
	abs := func(p string) (string, error) {
		if p == "" {
			return "", nil
		}
		return filepath.Abs(p)
	}
	var err error
	if srcDir, err = abs(srcDir); err != nil {
		return err
	}
	if outFile, err = abs(outFile); err != nil {
		return err
	}
	if opts.SigningKey, err = abs(opts.SigningKey); err != nil {
		return err
	}
	if opts.ClaimsFile, err = abs(opts.ClaimsFile); err != nil {
		return err
	}
	st, err := os.Stat(srcDir)
	if err != nil {
		return fmt.Errorf("OPABuild: %w", err)
	}
	dir, input := srcDir, "."
	if !st.IsDir() {
		dir, input = filepath.Dir(srcDir), filepath.Base(srcDir)
	}
	args := []string{"build", "-o", outFile}
	if opts.Revision != "" {
		args = append(args, "--revision", opts.Revision)
	}
	if opts.SigningKey != "" {
		args = append(args, "--signing-key", opts.SigningKey)
	}
	if opts.SigningAlg != "" {
		args = append(args, "--signing-alg", opts.SigningAlg)
	}
	if opts.ClaimsFile != "" {
		args = append(args, "--claims-file", opts.ClaimsFile)
	}
	args = append(args, opts.Args...)
	args = append(args, "-b", input)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, opaBinary, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("(cd %s && %s %s): %w\n%s", dir, opaBinary, strings.Join(args, " "), err, out)
	}
	return nil
}

// SigningKey is a key pair written by GenerateSigningKey.
type SigningKey struct {
	Algorithm      string // the JWS algorithm: RS256, ES256, ...
	PrivateKeyFile string // PKCS#8 PEM ("PRIVATE KEY"), for BuildOptions.SigningKey
	PublicKeyFile  string // PKIX PEM ("PUBLIC KEY")
	PublicKeyPEM   string // the public key file's content, for OPA's keys.<id>.key
}

// GenerateSigningKey writes a new key pair for the JWS algorithm alg (RS256, RS384,
// RS512, PS256, PS384, PS512: RSA 2048; ES256, ES384, ES512: ECDSA P-256, P-384,
// P-521) to dir/name.key and dir/name.pub.pem.
func GenerateSigningKey(dir, name, alg string) (*SigningKey, error) {
	var priv crypto.Signer
	var err error
	switch alg {
	case "RS256", "RS384", "RS512", "PS256", "PS384", "PS512":
		priv, err = rsa.GenerateKey(rand.Reader, 2048)
	case "ES256":
		priv, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case "ES384":
		priv, err = ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	case "ES512":
		priv, err = ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
	default:
		return nil, fmt.Errorf("GenerateSigningKey: unsupported algorithm %q", alg)
	}
	if err != nil {
		return nil, err
	}
	privDER, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(priv.Public())
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	k := &SigningKey{
		Algorithm:      alg,
		PrivateKeyFile: filepath.Join(dir, name+".key"),
		PublicKeyFile:  filepath.Join(dir, name+".pub.pem"),
		PublicKeyPEM:   string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})),
	}
	if err := os.WriteFile(k.PrivateKeyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: privDER}), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(k.PublicKeyFile, []byte(k.PublicKeyPEM), 0o644); err != nil {
		return nil, err
	}
	return k, nil
}

// Media types of an OPA bundle pushed as an OCI artifact. OPA's OCI downloader
// (v1/download/oci_download.go, bundleLayer) takes the first layer of type
// MediaTypeOPABundleLayer as the bundle tarball; it copies the config blob too but never
// reads it. OPA's docs push the config as MediaTypeOPABundleConfig with content {}.
const (
	MediaTypeOCIManifest     = "application/vnd.oci.image.manifest.v1+json"
	MediaTypeOCIIndex        = "application/vnd.oci.image.index.v1+json"
	MediaTypeOPABundleConfig = "application/vnd.oci.image.config.v1+json"
	MediaTypeOPABundleLayer  = "application/vnd.oci.image.layer.v1.tar+gzip"
)

// ociDescriptor is an OCI content descriptor.
type ociDescriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// ociManifest is an OCI image manifest.
type ociManifest struct {
	SchemaVersion int             `json:"schemaVersion"`
	MediaType     string          `json:"mediaType"`
	Config        ociDescriptor   `json:"config"`
	Layers        []ociDescriptor `json:"layers"`
}

// Digest returns the OCI digest (sha256:<hex>) of data. The digest of a bundle tarball
// is its layer's: OPA's OCI downloader uses its hex part as the bundle's etag.
func Digest(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// registryClient talks the OCI distribution API to a plain-HTTP registry.
var registryClient = &http.Client{Timeout: 30 * time.Second}

// PushBundle pushes bundleTarGz (an `opa build` output) to the plain-HTTP registry at
// registryHost (host:port) as repository:tag, in the layout OPA's OCI downloader reads:
// an OCI image manifest whose config is {} (MediaTypeOPABundleConfig) and whose single
// layer is the tarball (MediaTypeOPABundleLayer, titled bundle.tar.gz as `oras push`
// does). Pushing again to the same tag moves the tag. It returns the manifest's digest.
func PushBundle(ctx context.Context, registryHost, repository, tag string, bundleTarGz []byte) (string, error) {
	if len(bundleTarGz) < 2 || bundleTarGz[0] != 0x1f || bundleTarGz[1] != 0x8b {
		return "", errors.New("PushBundle: the bundle is not gzip data (want an `opa build` .tar.gz)")
	}
	base := "http://" + registryHost + "/v2/" + repository
	config := []byte("{}")
	m := ociManifest{
		SchemaVersion: 2,
		MediaType:     MediaTypeOCIManifest,
		Config:        ociDescriptor{MediaType: MediaTypeOPABundleConfig, Digest: Digest(config), Size: int64(len(config))},
		Layers: []ociDescriptor{{
			MediaType:   MediaTypeOPABundleLayer,
			Digest:      Digest(bundleTarGz),
			Size:        int64(len(bundleTarGz)),
			Annotations: map[string]string{"org.opencontainers.image.title": "bundle.tar.gz"},
		}},
	}
	for _, blob := range [][]byte{config, bundleTarGz} {
		if err := pushBlob(ctx, base, blob); err != nil {
			return "", err
		}
	}
	body, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	if err := PushManifest(ctx, registryHost, repository, tag, MediaTypeOCIManifest, body); err != nil {
		return "", err
	}
	return Digest(body), nil
}

// PushManifest puts body (a manifest or index of type mediaType) at repository:ref.
// With PushBundle's blobs already present, a test can push its own layouts (an image
// index wrapping a bundle manifest, a manifest with no bundle layer, ...).
func PushManifest(ctx context.Context, registryHost, repository, ref, mediaType string, body []byte) error {
	u := "http://" + registryHost + "/v2/" + repository + "/manifests/" + ref
	resp, err := registryDo(ctx, http.MethodPut, u, mediaType, body)
	if err != nil {
		return err
	}
	if resp.status != http.StatusCreated {
		return fmt.Errorf("PUT %s: %d %s", u, resp.status, resp.body)
	}
	if got, want := resp.header.Get("Docker-Content-Digest"), Digest(body); got != "" && got != want {
		return fmt.Errorf("PUT %s: the registry stored digest %s, want %s", u, got, want)
	}
	return nil
}

// pushBlob uploads data monolithically (POST, then PUT ?digest=) unless it is there.
func pushBlob(ctx context.Context, base string, data []byte) error {
	dgst := Digest(data)
	resp, err := registryDo(ctx, http.MethodHead, base+"/blobs/"+dgst, "", nil)
	if err != nil {
		return err
	}
	if resp.status == http.StatusOK {
		return nil
	}
	resp, err = registryDo(ctx, http.MethodPost, base+"/blobs/uploads/", "", nil)
	if err != nil {
		return err
	}
	if resp.status != http.StatusAccepted {
		return fmt.Errorf("POST %s/blobs/uploads/: %d %s", base, resp.status, resp.body)
	}
	baseURL, err := url.Parse(base)
	if err != nil {
		return err
	}
	loc, err := url.Parse(resp.header.Get("Location"))
	if err != nil || resp.header.Get("Location") == "" {
		return fmt.Errorf("POST %s/blobs/uploads/: bad Location %q", base, resp.header.Get("Location"))
	}
	put := baseURL.ResolveReference(loc)
	q := put.Query()
	q.Set("digest", dgst)
	put.RawQuery = q.Encode()
	resp, err = registryDo(ctx, http.MethodPut, put.String(), "application/octet-stream", data)
	if err != nil {
		return err
	}
	if resp.status != http.StatusCreated {
		return fmt.Errorf("PUT blob %s: %d %s", dgst, resp.status, resp.body)
	}
	return nil
}

// ResolveManifest returns the digest and media type the registry serves for
// repository:ref (a tag or digest), as OPA's downloader resolves it (HEAD).
func ResolveManifest(ctx context.Context, registryHost, repository, ref string) (digest, mediaType string, err error) {
	u := "http://" + registryHost + "/v2/" + repository + "/manifests/" + ref
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, u, nil)
	if err != nil {
		return "", "", err
	}
	req.Header.Set("Accept", MediaTypeOCIManifest+", "+MediaTypeOCIIndex)
	resp, err := registryClient.Do(req)
	if err != nil {
		return "", "", err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", "", fmt.Errorf("HEAD %s: %s", u, resp.Status)
	}
	return resp.Header.Get("Docker-Content-Digest"), resp.Header.Get("Content-Type"), nil
}

// DeleteManifest deletes the manifest digest (sha256:...) from repository, and with it
// every tag pointing at it: OPA's downloader then gets 404 for the tag.
func DeleteManifest(ctx context.Context, registryHost, repository, digest string) error {
	u := "http://" + registryHost + "/v2/" + repository + "/manifests/" + digest
	resp, err := registryDo(ctx, http.MethodDelete, u, "", nil)
	if err != nil {
		return err
	}
	if resp.status != http.StatusAccepted {
		return fmt.Errorf("DELETE %s: %d %s", u, resp.status, resp.body)
	}
	return nil
}

type registryResponse struct {
	status int
	header http.Header
	body   string
}

func registryDo(ctx context.Context, method, u, contentType string, body []byte) (*registryResponse, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := registryClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return nil, fmt.Errorf("%s %s: reading the answer: %w", method, u, err)
	}
	return &registryResponse{status: resp.StatusCode, header: resp.Header, body: strings.TrimSpace(string(b))}, nil
}
