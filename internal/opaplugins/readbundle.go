package opaplugins

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"

	"github.com/sar-bridge/sar-bridge/policies"
)

// maxBundleDownload bounds a bundle ReadBundle downloads.
const maxBundleDownload = 256 << 20

// ReadBundle reads one OPA bundle, as the bundle plugin would activate it, from a
// bundle file (.tar.gz), a directory laid out as a bundle, or an http(s) URL of a
// bundle file: what a one-shot command (`sar-bridge replay --bundle`) decides with
// instead of a configured service. Signatures are not verified: the bundle is a
// candidate a person names, not one a running bridge activates.
func ReadBundle(ctx context.Context, source string) (policies.Bundle, error) {
	var reader *bundle.Reader
	switch {
	case strings.HasPrefix(source, "http://") || strings.HasPrefix(source, "https://"):
		body, err := download(ctx, source)
		if err != nil {
			return policies.Bundle{}, err
		}
		defer body.Close()
		reader = bundle.NewReader(io.LimitReader(body, maxBundleDownload))
	default:
		info, err := os.Stat(source)
		if err != nil {
			return policies.Bundle{}, fmt.Errorf("bundle: %w", err)
		}
		if info.IsDir() {
			reader = bundle.NewCustomReader(bundle.NewDirectoryLoader(source))
			break
		}
		f, err := os.Open(source)
		if err != nil {
			return policies.Bundle{}, fmt.Errorf("bundle: %w", err)
		}
		defer f.Close()
		reader = bundle.NewReader(f)
	}
	b, err := reader.WithRegoVersion(ast.RegoV1).WithSkipBundleVerification(true).Read()
	if err != nil {
		return policies.Bundle{}, fmt.Errorf("bundle %s: %w", source, err)
	}
	if b.Type() == bundle.DeltaBundleType {
		return policies.Bundle{}, fmt.Errorf("bundle %s: delta bundles are not supported: use a snapshot bundle", source)
	}
	return convert(bundleName(source), &b)
}

// bundleName names a bundle read from source after its file, as OPA names a bundle
// loaded from a path.
func bundleName(source string) string {
	name := strings.TrimSuffix(filepath.Base(strings.TrimRight(source, "/")), ".tar.gz")
	if name == "" || name == "." || name == "/" {
		return "bundle"
	}
	return name
}

func download(ctx context.Context, url string) (io.ReadCloser, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("bundle: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("downloading the bundle: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		cancel()
		return nil, fmt.Errorf("downloading the bundle %s: %s", url, resp.Status)
	}
	return cancelOnClose{ReadCloser: resp.Body, cancel: cancel}, nil
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}
