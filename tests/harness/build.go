package harness

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/devstack"
)

var (
	buildsMu sync.Mutex
	builds   = map[string]string{}
)

// GoBinary builds the main package at pkg (relative to the repository,
// "./examples/shop-go") once per test binary and returns its path.
func GoBinary(t testing.TB, pkg string) string {
	t.Helper()
	buildsMu.Lock()
	defer buildsMu.Unlock()
	if path, ok := builds[pkg]; ok {
		return path
	}
	root, err := devstack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "spiderpool-bin-")
	if err != nil {
		t.Fatal(err)
	}
	atExit(func() { _ = os.RemoveAll(dir) })
	path := filepath.Join(dir, filepath.Base(pkg))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", path, pkg)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v", pkg, errors.New(string(out)))
	}
	builds[pkg] = path
	return path
}
