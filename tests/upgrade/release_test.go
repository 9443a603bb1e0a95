// Package upgrade runs nodes of the previous release, built from its git
// tag, beside nodes of this source tree on one campaign, as a rolling
// upgrade does, against the real Temporal dev server and Postgres.
package upgrade

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/devstack"
)

// PreviousRelease is the tag of the release a rolling upgrade starts from.
const PreviousRelease = "v0.1.0"

var (
	releaseOnce sync.Once
	releaseBin  string
	releaseErr  error
)

// releaseBinary returns the spiderpool binary of PreviousRelease, built
// from the tag's tree (git archive, so the working tree is untouched) with
// the module cache this build uses. It is kept in bin/ under the tag's
// commit, so later runs skip the build and a moved tag is never mistaken
// for the old build.
func releaseBinary(t testing.TB) string {
	t.Helper()
	releaseOnce.Do(func() { releaseBin, releaseErr = buildRelease(PreviousRelease) })
	if releaseErr != nil {
		t.Fatalf("build %s: %v", PreviousRelease, releaseErr)
	}
	return releaseBin
}

func buildRelease(tag string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	root, err := devstack.RepoRoot()
	if err != nil {
		return "", err
	}
	out, err := run(ctx, root, "git", "rev-parse", "--verify", tag+"^{commit}")
	if err != nil {
		return "", fmt.Errorf("find tag %s in %s (a clone without tags cannot run this test; git fetch --tags): %w", tag, root, err)
	}
	commit := strings.TrimSpace(out)
	cached := filepath.Join(root, "bin", "spiderpool-"+tag+"-"+commit[:12])
	if _, err := os.Stat(cached); err == nil {
		return cached, nil
	}

	src, err := os.MkdirTemp("", "spiderpool-"+tag+"-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(src)
	tarball := filepath.Join(src, "tree.tar")
	if out, err := run(ctx, root, "git", "archive", "--format=tar", "-o", tarball, commit); err != nil {
		return "", fmt.Errorf("git archive %s: %w\n%s", commit, err, out)
	}
	if out, err := run(ctx, src, "tar", "-xf", tarball); err != nil {
		return "", fmt.Errorf("unpack %s: %w\n%s", tag, err, out)
	}
	if err := os.MkdirAll(filepath.Dir(cached), 0o755); err != nil {
		return "", err
	}
	// Built next to its final name and renamed: a concurrent test binary
	// never runs a half-written file.
	tmp := cached + fmt.Sprintf(".%d.tmp", os.Getpid())
	if out, err := run(ctx, src, "go", "build", "-buildvcs=false", "-o", tmp, "./cmd/spiderpool"); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("go build ./cmd/spiderpool at %s: %w\n%s", tag, err, out)
	}
	return cached, os.Rename(tmp, cached)
}

func run(ctx context.Context, dir, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}
