package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Where the binary lives in the image, and who runs it: the conventional "nonroot" ids
// of distroless images, so a cluster's runAsNonRoot policies accept it as it is.
const (
	Entrypoint = "/sar-bridge"
	User       = "65532:65532"
)

// Label keys of the OCI image spec.
const (
	labelSource   = "org.opencontainers.image.source"
	labelVersion  = "org.opencontainers.image.version"
	labelRevision = "org.opencontainers.image.revision"
	labelLicenses = "org.opencontainers.image.licenses"
	labelTitle    = "org.opencontainers.image.title"
	labelCreated  = "org.opencontainers.image.created"
	refNameKey    = "org.opencontainers.image.ref.name"
)

func build(o options) error {
	created, err := createdTime(o.created)
	if err != nil {
		return err
	}
	tag, err := name.NewTag(o.repository+":"+o.tag, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("image reference: %w", err)
	}
	index := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var dockerImage v1.Image
	for _, b := range o.binaries {
		img, err := platformImage(b, o, created)
		if err != nil {
			return fmt.Errorf("%s/%s: %w", b.os, b.arch, err)
		}
		index = mutate.AppendManifests(index, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: b.os, Architecture: b.arch}},
		})
		if b.os == o.dockerOS && b.arch == o.dockerArch {
			dockerImage = img
		}
	}
	if o.ociArchive != "" {
		if err := writeOCIArchive(o.ociArchive, index, tag); err != nil {
			return fmt.Errorf("OCI archive: %w", err)
		}
	}
	if o.dockerArchive != "" {
		if dockerImage == nil {
			return fmt.Errorf("docker archive: no --binary for %s/%s", o.dockerOS, o.dockerArch)
		}
		if err := os.MkdirAll(filepath.Dir(o.dockerArchive), 0o755); err != nil {
			return err
		}
		if err := tarball.WriteToFile(o.dockerArchive, tag, dockerImage); err != nil {
			return fmt.Errorf("docker archive: %w", err)
		}
	}
	return nil
}

// platformImage is one platform's image: the binary as the only layer, on nothing.
func platformImage(b platformBinary, o options, created time.Time) (v1.Image, error) {
	binary, err := os.ReadFile(b.path)
	if err != nil {
		return nil, err
	}
	layerTar, err := binaryLayerTar(binary, created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	if img, err = mutate.AppendLayers(img, layer); err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = b.os, b.arch
	cfg.Config.Entrypoint = []string{Entrypoint}
	cfg.Config.User = User
	cfg.Config.WorkingDir = "/"
	cfg.Config.ExposedPorts = map[string]struct{}{"8080/tcp": {}, "8081/tcp": {}}
	cfg.Config.Labels = map[string]string{
		labelSource:   o.source,
		labelVersion:  o.version,
		labelRevision: o.revision,
		labelLicenses: o.licenses,
		labelTitle:    "sar-bridge",
		labelCreated:  created.Format(time.RFC3339),
	}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return nil, err
	}
	return mutate.CreatedAt(img, v1.Time{Time: created})
}

// binaryLayerTar is the layer's file system: the binary, executable by anyone, owned by
// root so the unprivileged user cannot replace it.
func binaryLayerTar(binary []byte, modTime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := &tar.Header{
		Typeflag: tar.TypeReg, Name: Entrypoint[1:], Mode: 0o755, Size: int64(len(binary)),
		ModTime: modTime, Format: tar.FormatPAX,
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, err
	}
	if _, err := tw.Write(binary); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeOCIArchive writes an OCI image layout whose index.json names the multi-platform
// index by its tag (what `skopeo copy oci-archive:FILE` and `crane push` expect), then
// packs the layout directory into one tar file.
func writeOCIArchive(path string, index v1.ImageIndex, tag name.Tag) error {
	dir, err := os.MkdirTemp("", "sar-bridge-oci-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	if err := p.AppendIndex(index, layout.WithAnnotations(map[string]string{refNameKey: tag.TagStr()})); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	if err := tw.AddFS(os.DirFS(dir)); err != nil {
		f.Close()
		return fmt.Errorf("packing %s: %w", path, err)
	}
	if err := tw.Close(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
