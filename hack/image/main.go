// Command image builds sar-bridge's container image without a container daemon: one
// layer holding the static binary, on an empty base, for each platform given, with
// go-containerregistry writing the image format.
//
//	go run . --binary linux/amd64=../../bin/linux-amd64/sar-bridge \
//	         --binary linux/arm64=../../bin/linux-arm64/sar-bridge \
//	         --version v0.1.0 --revision "$(git rev-parse HEAD)" --tag v0.1.0 \
//	         --oci-archive ../../bin/image/sar-bridge.oci.tar \
//	         --docker-archive ../../bin/image/sar-bridge.docker.tar
//
// Outputs: an OCI image-layout archive holding the multi-platform index (for `skopeo
// copy oci-archive:` or `crane push`), and a `docker load` / `kind load image-archive`
// tarball of the host's platform.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"
)

// options are the command line.
type options struct {
	binaries      platformBinaries
	repository    string
	tag           string
	version       string
	revision      string
	source        string
	licenses      string
	created       string
	ociArchive    string
	dockerArchive string
	dockerOS      string
	dockerArch    string
}

// platformBinaries collects repeated --binary os/arch=path flags, in order.
type platformBinaries []platformBinary

type platformBinary struct{ os, arch, path string }

func (p *platformBinaries) String() string { return fmt.Sprint(*p) }

func (p *platformBinaries) Set(v string) error {
	platform, path, ok := strings.Cut(v, "=")
	osName, arch, ok2 := strings.Cut(platform, "/")
	if !ok || !ok2 || osName == "" || arch == "" || path == "" {
		return fmt.Errorf("%q: want os/arch=path, e.g. linux/amd64=bin/linux-amd64/sar-bridge", v)
	}
	*p = append(*p, platformBinary{os: osName, arch: arch, path: path})
	return nil
}

// parseOptions reads the command line; usage and flag errors go to output.
func parseOptions(args []string, output io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	fs.SetOutput(output)
	fs.Var(&o.binaries, "binary", "os/arch=path of a static sar-bridge binary (repeatable, one per platform)")
	fs.StringVar(&o.repository, "repository", "ghcr.io/sar-bridge/sar-bridge", "image repository the tag belongs to")
	fs.StringVar(&o.tag, "tag", "", "image tag (the release version the manifests name)")
	fs.StringVar(&o.version, "version", "", "version label (git describe)")
	fs.StringVar(&o.revision, "revision", "", "revision label (the full commit)")
	fs.StringVar(&o.source, "source", "https://github.com/sar-bridge/sar-bridge", "source label")
	fs.StringVar(&o.licenses, "licenses", "Apache-2.0", "licenses label (SPDX)")
	fs.StringVar(&o.created, "created", "", "creation time, RFC 3339 or Unix seconds (default: now); the commit time keeps builds reproducible")
	fs.StringVar(&o.ociArchive, "oci-archive", "", "write the multi-platform OCI image-layout archive here")
	fs.StringVar(&o.dockerArchive, "docker-archive", "", "write a docker-load tarball of --docker-platform here")
	fs.StringVar(&o.dockerOS, "docker-os", "linux", "OS of the docker-load tarball")
	fs.StringVar(&o.dockerArch, "docker-arch", runtime.GOARCH, "architecture of the docker-load tarball")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case len(o.binaries) == 0:
		return o, errors.New("--binary is required")
	case o.tag == "" || o.version == "" || o.revision == "":
		return o, errors.New("--tag, --version and --revision are required")
	case o.ociArchive == "" && o.dockerArchive == "":
		return o, errors.New("nothing to write: give --oci-archive and/or --docker-archive")
	}
	return o, nil
}

// createdTime parses --created; empty is now.
func createdTime(s string) (time.Time, error) {
	if s == "" {
		return time.Now().UTC().Truncate(time.Second), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t.UTC(), nil
	}
	var secs int64
	if _, err := fmt.Sscanf(s, "%d", &secs); err != nil {
		return time.Time{}, fmt.Errorf("--created %q: want RFC 3339 or Unix seconds", s)
	}
	return time.Unix(secs, 0).UTC(), nil
}

func main() {
	o, err := parseOptions(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err == nil {
		err = build(o)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "image: %v\n", err)
		os.Exit(1)
	}
}
