// Package upgrade runs nodes of the previous release beside nodes of this
// source tree on one campaign, as a rolling upgrade does, against the real
// Temporal dev server and Postgres.
package upgrade

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/devstack"
)

// PreviousRelease is the release a rolling upgrade starts from: the
// oldest whose campaigns this release's nodes run (the support window,
// docs/upgrading.md).
const PreviousRelease = "v0.11.0"

// releaseSource is the source of PreviousRelease that builds its node
// binary: `git archive 8b9be4f` (the v0.11.0 tree, "workflows/testdata:
// record v0.11.0 histories") with only what `go build ./cmd/spiderpool`
// needs: no tests, test data, docs, deploy, bench or example files, no
// Markdown. `git get-tar-commit-id` reads the commit from it. It is
// committed, not looked up by tag, because a clone need not carry tags
// (CI's does not) or full history.
var releaseSource = filepath.Join("testdata", "spiderpool-"+PreviousRelease+"-src.tar.gz")

var (
	releaseOnce sync.Once
	releaseBin  string
	releaseErr  error
)

// releaseBinary returns the spiderpool binary of PreviousRelease, built
// from releaseSource with the module cache this build uses. It is kept in
// bin/ under the snapshot's digest, so later runs skip the build and a
// changed snapshot is never mistaken for the old build.
func releaseBinary(t testing.TB) string {
	t.Helper()
	releaseOnce.Do(func() { releaseBin, releaseErr = buildRelease(PreviousRelease, releaseSource) })
	if releaseErr != nil {
		t.Fatalf("build %s: %v", PreviousRelease, releaseErr)
	}
	return releaseBin
}

func buildRelease(release, snapshot string) (string, error) {
	// As long as harness.Binary allows: cold, this compiles every module.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	root, err := devstack.RepoRoot()
	if err != nil {
		return "", err
	}
	archive, err := os.ReadFile(snapshot)
	if err != nil {
		return "", fmt.Errorf("source of %s: %w", release, err)
	}
	sum := sha256.Sum256(archive)
	cached := filepath.Join(root, "bin", "spiderpool-"+release+"-"+hex.EncodeToString(sum[:6]))
	if _, err := os.Stat(cached); err == nil {
		return cached, nil
	}

	src, err := os.MkdirTemp("", "spiderpool-"+release+"-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(src)
	if err := unpack(snapshot, src); err != nil {
		return "", fmt.Errorf("unpack %s: %w", snapshot, err)
	}
	if err := os.MkdirAll(filepath.Dir(cached), 0o755); err != nil {
		return "", err
	}
	// Built next to its final name and renamed: a concurrent test binary
	// never runs a half-written file.
	tmp := cached + fmt.Sprintf(".%d.tmp", os.Getpid())
	if out, err := run(ctx, src, "go", "build", "-buildvcs=false", "-o", tmp, "./cmd/spiderpool"); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("go build ./cmd/spiderpool at %s: %w\n%s", release, err, out)
	}
	return cached, os.Rename(tmp, cached)
}

// unpack writes the regular files and directories of a .tar.gz under dir,
// refusing any name that would land outside it. A pax global header (git
// archive's, naming the commit) is skipped.
func unpack(archive, dir string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return err
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if h.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		name := filepath.Clean(h.Name)
		if name == "." {
			continue
		}
		if filepath.IsAbs(name) || name == ".." || strings.HasPrefix(name, ".."+string(filepath.Separator)) {
			return fmt.Errorf("entry %q leaves the tree", h.Name)
		}
		path := filepath.Join(dir, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			out, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, tr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		default:
			return fmt.Errorf("entry %q: type %c is not a file or directory", h.Name, h.Typeflag)
		}
	}
}

func run(ctx context.Context, dir, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}
