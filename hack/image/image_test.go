package main

import (
	"archive/tar"
	"debug/elf"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// What `make image` built, and what it should hold; `make image-test` sets these.
type expectation struct {
	ociArchive, dockerArchive string
	repository, tag           string
	version, revision         string
}

func expected(t *testing.T) expectation {
	e := expectation{
		ociArchive:    os.Getenv("SAR_BRIDGE_IMAGE_OCI"),
		dockerArchive: os.Getenv("SAR_BRIDGE_IMAGE_DOCKER"),
		repository:    os.Getenv("SAR_BRIDGE_IMAGE_REPOSITORY"),
		tag:           os.Getenv("SAR_BRIDGE_IMAGE_TAG"),
		version:       os.Getenv("SAR_BRIDGE_IMAGE_VERSION"),
		revision:      os.Getenv("SAR_BRIDGE_IMAGE_REVISION"),
	}
	if e.ociArchive == "" {
		t.Skip("SAR_BRIDGE_IMAGE_OCI is not set: run `make image-test`, which builds the image first")
	}
	return e
}

// Each platform of the OCI archive is a runnable sar-bridge image: the entrypoint, the
// user, the labels, one layer with nothing but a static binary, and that binary runs
// `--version` in a root of only the image's files, as the image's user.
func TestOCIArchive(t *testing.T) {
	e := expected(t)
	index := openOCIArchive(t, e)
	manifest, err := index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var platforms []string
	for _, desc := range manifest.Manifests {
		if desc.Platform == nil {
			t.Fatalf("manifest %s has no platform", desc.Digest)
		}
		platform := desc.Platform.OS + "/" + desc.Platform.Architecture
		platforms = append(platforms, platform)
		t.Run(platform, func(t *testing.T) {
			img, err := index.Image(desc.Digest)
			if err != nil {
				t.Fatal(err)
			}
			checkConfig(t, img, e, desc.Platform.Architecture)
			rootfs := extractRootFS(t, img)
			checkStaticBinary(t, filepath.Join(rootfs, Entrypoint), desc.Platform.Architecture)
			out := runInRoot(t, rootfs, desc.Platform.Architecture, Entrypoint, "--version")
			for _, want := range []string{"sar-bridge " + e.version, e.revision} {
				if !strings.Contains(out, want) {
					t.Errorf("%s --version printed %q; want it to contain %q", Entrypoint, out, want)
				}
			}
		})
	}
	slices.Sort(platforms)
	if want := []string{"linux/amd64", "linux/arm64"}; !slices.Equal(platforms, want) {
		t.Errorf("platforms %v, want %v", platforms, want)
	}
}

// The docker-load tarball is the host platform's image of the same index, under the tag
// the manifests name.
func TestDockerArchive(t *testing.T) {
	e := expected(t)
	tag, err := name.NewTag(e.repository + ":" + e.tag)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(e.dockerArchive, &tag)
	if err != nil {
		t.Fatalf("docker archive %s has no image %s: %v", e.dockerArchive, tag, err)
	}
	checkConfig(t, img, e, runtime.GOARCH)
	index := openOCIArchive(t, e)
	manifest, err := index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	want, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	for _, desc := range manifest.Manifests {
		if desc.Platform.Architecture != runtime.GOARCH {
			continue
		}
		ociImg, err := index.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := ociImg.ConfigName(); got != want {
			t.Errorf("docker archive config %s, OCI archive's %s config %s: not the same image", want, runtime.GOARCH, got)
		}
		return
	}
	t.Errorf("OCI archive has no %s image", runtime.GOARCH)
}

// openOCIArchive unpacks the archive and returns the index its index.json names by tag.
func openOCIArchive(t *testing.T, e expectation) v1.ImageIndex {
	t.Helper()
	dir := t.TempDir()
	untar(t, e.ociArchive, dir)
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("%s is not an OCI image layout: %v", e.ociArchive, err)
	}
	manifest, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(manifest.Manifests) != 1 {
		t.Fatalf("index.json lists %d entries, want 1 (the multi-platform index)", len(manifest.Manifests))
	}
	desc := manifest.Manifests[0]
	if got := desc.Annotations[refNameKey]; got != e.tag {
		t.Errorf("index.json ref name %q, want %q", got, e.tag)
	}
	index, err := top.ImageIndex(desc.Digest)
	if err != nil {
		t.Fatal(err)
	}
	return index
}

func checkConfig(t *testing.T, img v1.Image, e expectation, arch string) {
	t.Helper()
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OS != "linux" || cfg.Architecture != arch {
		t.Errorf("config platform %s/%s, want linux/%s", cfg.OS, cfg.Architecture, arch)
	}
	if !slices.Equal(cfg.Config.Entrypoint, []string{Entrypoint}) || len(cfg.Config.Cmd) != 0 {
		t.Errorf("entrypoint %q cmd %q, want [%s] and none", cfg.Config.Entrypoint, cfg.Config.Cmd, Entrypoint)
	}
	if cfg.Config.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532", cfg.Config.User)
	}
	wantLabels := map[string]string{
		labelSource:   "https://github.com/sar-bridge/sar-bridge",
		labelVersion:  e.version,
		labelRevision: e.revision,
		labelLicenses: "Apache-2.0",
	}
	for k, want := range wantLabels {
		if got := cfg.Config.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Errorf("%d layers, want 1 on an empty base", len(layers))
	}
}

// extractRootFS writes the image's flattened file system into a directory and checks it
// holds the binary and nothing else: no shell, no package manager.
func extractRootFS(t *testing.T, img v1.Image) string {
	t.Helper()
	rootfs := t.TempDir()
	rc := mutate.Extract(img)
	defer rc.Close()
	files := extractTar(t, rc, rootfs)
	if want := []string{Entrypoint[1:]}; !slices.Equal(files, want) {
		t.Errorf("image files %q, want only %q", files, want)
	}
	return rootfs
}

// checkStaticBinary: the right machine, and no dynamic loader or shared library that
// the image would have to provide.
func checkStaticBinary(t *testing.T, path, arch string) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatalf("%s is not an ELF binary: %v", path, err)
	}
	defer f.Close()
	wantMachine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]
	if f.Machine != wantMachine {
		t.Errorf("ELF machine %v, want %v", f.Machine, wantMachine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary names a dynamic loader (PT_INTERP): it is not static")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Errorf("the binary needs shared libraries %q", libs)
	}
}

// runInRoot runs a command with rootfs as its root directory, as the image's user,
// the way a container runtime starts the entrypoint. A foreign architecture runs under
// qemu's user-mode emulator, copied into a scratch copy of the root (a static binary
// itself, so it adds nothing the entrypoint could use).
func runInRoot(t *testing.T, rootfs, arch string, argv ...string) string {
	t.Helper()
	if arch != runtime.GOARCH {
		emulator := qemuFor(t, arch)
		if err := copyFile(emulator, filepath.Join(rootfs, ".emulator"), 0o755); err != nil {
			t.Fatal(err)
		}
		argv = append([]string{"/.emulator"}, argv...)
	}
	var cmd *exec.Cmd
	if os.Geteuid() == 0 {
		cmd = exec.Command("chroot", append([]string{"--userspec=65532:65532", rootfs}, argv...)...)
	} else {
		// Unprivileged: a user namespace makes chroot possible; only our own id maps in.
		cmd = exec.Command("unshare", append([]string{"-r", "chroot", rootfs}, argv...)...)
	}
	cmd.Env = []string{} // a container starts with the image's environment: none here
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s in the image's root: %v\n%s", strings.Join(argv, " "), err, out)
	}
	return string(out)
}

func qemuFor(t *testing.T, arch string) string {
	t.Helper()
	qemuArch := map[string]string{"arm64": "aarch64", "amd64": "x86_64"}[arch]
	path, err := exec.LookPath("qemu-" + qemuArch + "-static")
	if err != nil {
		t.Fatalf("running the %s image here needs qemu-%s-static (Debian's qemu-user-static; hack/deps.sh installs it): %v", arch, qemuArch, err)
	}
	return path
}

func untar(t *testing.T, archive, dir string) {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	extractTar(t, f, dir)
}

// extractTar writes regular files and directories of a tar stream under dir and returns
// the regular files' names; it refuses names that would leave dir.
func extractTar(t *testing.T, r io.Reader, dir string) []string {
	t.Helper()
	var files []string
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !filepath.IsLocal(hdr.Name) {
			t.Fatalf("tar entry %q leaves the directory", hdr.Name)
		}
		target := filepath.Join(dir, hdr.Name)
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(hdr.Mode)&0o777)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(f, tr); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			files = append(files, filepath.Clean(hdr.Name))
		default:
			t.Fatalf("tar entry %q has unexpected type %c", hdr.Name, hdr.Typeflag)
		}
	}
	slices.Sort(files)
	return files
}

func copyFile(src, dst string, mode os.FileMode) error {
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, mode)
}
