// Command image assembles the registrar's container image from binaries built
// beforehand (scripts/image builds them): one image per platform, FROM
// scratch, holding the binary as its entrypoint and the licence, gathered in
// one OCI image index. It writes an OCI image layout, pushes to a registry, or
// both, with go-containerregistry: no daemon, no runtime, no emulation.
//
// The result is reproducible: every time in it is -epoch (SOURCE_DATE_EPOCH),
// tar entries are sorted with owner 0:0 and fixed modes, gzip writes no name
// or time, and nothing else varies. The same binaries give the same digests.
//
//	go run . -epoch 1733356800 -version 0.1.0 -revision $(git rev-parse HEAD) \
//	    -source https://example.org/repo -licence ../../LICENSE \
//	    -binary linux/amd64=PATH -binary linux/arm64=PATH \
//	    [-oci-layout DIR] [-push REGISTRY/REPO:TAG [-insecure]]
//
// It prints the index's digest on stdout.
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Entrypoint is the binary's path in the image, as in the Dockerfile.
const Entrypoint = "/csi-node-driver-registrar"

// Licence is the licence's path in the image.
const Licence = "/LICENSE"

// binaries is the repeated -binary flag: PLATFORM=PATH.
type binaries map[string]string

func (b binaries) String() string { return fmt.Sprint(map[string]string(b)) }

func (b binaries) Set(v string) error {
	platform, path, ok := strings.Cut(v, "=")
	if !ok || platform == "" || path == "" {
		return fmt.Errorf("%q is not PLATFORM=PATH (e.g. linux/arm64=target/aarch64-unknown-linux-musl/release/csi-node-driver-registrar)", v)
	}
	if _, err := v1.ParsePlatform(platform); err != nil {
		return fmt.Errorf("%q: %v", platform, err)
	}
	b[platform] = path
	return nil
}

// Options say what goes into the image, beside the binaries.
type Options struct {
	Epoch    time.Time
	Version  string
	Revision string
	Source   string
	Licence  []byte
}

// Labels are the OCI annotations the images and the index carry.
func (o Options) Labels() map[string]string {
	return map[string]string{
		"org.opencontainers.image.source":   o.Source,
		"org.opencontainers.image.version":  o.Version,
		"org.opencontainers.image.revision": o.Revision,
		"org.opencontainers.image.licenses": "Apache-2.0",
		"org.opencontainers.image.title":    "csi-node-driver-registrar",
	}
}

// Layer is the one layer of a platform's image: the binary and the licence,
// sorted, owned by 0:0, dated o.Epoch.
func (o Options) Layer(binary []byte) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	files := []struct {
		path string
		mode int64
		data []byte
	}{
		{Entrypoint, 0o755, binary},
		{Licence, 0o644, o.Licence},
	}
	sort.Slice(files, func(i, j int) bool { return files[i].path < files[j].path })
	for _, f := range files {
		hdr := &tar.Header{
			Typeflag: tar.TypeReg,
			Name:     strings.TrimPrefix(f.path, "/"),
			Mode:     f.mode,
			Size:     int64(len(f.data)),
			ModTime:  o.Epoch,
			Format:   tar.FormatUSTAR,
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// Image is one platform's image.
func (o Options) Image(platform v1.Platform, binary []byte) (v1.Image, error) {
	layer, err := o.Layer(binary)
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: o.Epoch}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: platform.Architecture,
		OS:           platform.OS,
		Variant:      platform.Variant,
		Created:      created,
		Config: v1.Config{
			Entrypoint: []string{Entrypoint},
			Labels:     o.Labels(),
		},
	})
	if err != nil {
		return nil, err
	}
	return mutate.Append(img, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   created,
			CreatedBy: "scripts/image: COPY csi-node-driver-registrar LICENSE /",
		},
	})
}

// Index is the image index of every platform's image, sorted by platform.
func (o Options) Index(bins binaries) (v1.ImageIndex, error) {
	platforms := make([]string, 0, len(bins))
	for p := range bins {
		platforms = append(platforms, p)
	}
	sort.Strings(platforms)
	var idx v1.ImageIndex = empty.Index
	for _, p := range platforms {
		platform, err := v1.ParsePlatform(p)
		if err != nil {
			return nil, err
		}
		binary, err := os.ReadFile(bins[p])
		if err != nil {
			return nil, fmt.Errorf("the %s binary: %w", p, err)
		}
		img, err := o.Image(*platform, binary)
		if err != nil {
			return nil, fmt.Errorf("the %s image: %w", p, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: platform},
		})
	}
	idx = mutate.IndexMediaType(idx, types.OCIImageIndex)
	return mutate.Annotations(idx, o.Labels()).(v1.ImageIndex), nil
}

// WriteLayout writes idx as an OCI image layout in dir (made or replaced),
// its index.json naming it by the version.
func WriteLayout(dir string, idx v1.ImageIndex, version string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": version,
	}))
}

// Push pushes idx, every platform's image with it, to ref.
func Push(ref string, idx v1.ImageIndex, insecure bool) error {
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	r, err := name.ParseReference(ref, opts...)
	if err != nil {
		return err
	}
	return remote.WriteIndex(r, idx, remote.WithAuthFromKeychain(authn.DefaultKeychain))
}

func main() {
	bins := binaries{}
	flag.Var(bins, "binary", "PLATFORM=PATH of a static registrar binary (repeated)")
	epoch := flag.Int64("epoch", -1, "every time in the image, in seconds since 1970 (SOURCE_DATE_EPOCH)")
	version := flag.String("version", "", "org.opencontainers.image.version")
	revision := flag.String("revision", "", "org.opencontainers.image.revision (the commit)")
	source := flag.String("source", "", "org.opencontainers.image.source (the repository)")
	licence := flag.String("licence", "", "the licence file put in the image")
	ociLayout := flag.String("oci-layout", "", "write an OCI image layout in this directory")
	push := flag.String("push", "", "push the index to REGISTRY/REPOSITORY:TAG")
	insecure := flag.Bool("insecure", false, "reach the -push registry over plain HTTP (a loopback test registry)")
	flag.Parse()
	fail := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "image: "+format+"\n", args...)
		os.Exit(1)
	}
	switch {
	case len(bins) == 0:
		fail("no -binary given: give -binary linux/amd64=PATH and the other platforms")
	case *epoch < 0:
		fail("no -epoch given: give SOURCE_DATE_EPOCH (scripts/image takes the commit's time)")
	case *version == "" || *revision == "" || *source == "":
		fail("give -version, -revision and -source: they are the image's OCI labels")
	case *ociLayout == "" && *push == "":
		fail("nothing to do: give -oci-layout DIR, -push REF, or both")
	}
	text, err := os.ReadFile(*licence)
	if err != nil {
		fail("the licence: %v", err)
	}
	o := Options{
		Epoch:    time.Unix(*epoch, 0).UTC(),
		Version:  *version,
		Revision: *revision,
		Source:   *source,
		Licence:  text,
	}
	idx, err := o.Index(bins)
	if err != nil {
		fail("%v", err)
	}
	digest, err := idx.Digest()
	if err != nil {
		fail("%v", err)
	}
	if *ociLayout != "" {
		if err := WriteLayout(*ociLayout, idx, *version); err != nil {
			fail("writing the OCI layout %s: %v", *ociLayout, err)
		}
	}
	if *push != "" {
		if err := Push(*push, idx, *insecure); err != nil {
			fail("pushing to %s: %v", *push, err)
		}
	}
	fmt.Println(digest)
}
