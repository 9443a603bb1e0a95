package harness

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/devstack"
)

// Compose runs `docker compose -f file args...` (bin/docker-compose, which
// `make test-tools` builds; no Docker daemon is needed for `config`) in the
// repository, with no .env file and none of the caller's COMPOSE_*,
// DOCKER_* or SPIDERPOOL_* variables: the file is read as a newcomer's
// machine reads it. err is the command's exit, if it failed.
func Compose(t testing.TB, file string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	root, rerr := devstack.RepoRoot()
	if rerr != nil {
		t.Fatal(rerr)
	}
	bin := filepath.Join(root, "bin", "docker-compose")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("docker compose, which validates docker-compose.yml, is not built: %v\n"+
			"run `make test-tools` (make test does), which builds it from tools/compose", err)
	}
	noEnv := filepath.Join(t.TempDir(), "empty.env")
	if err := os.WriteFile(noEnv, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--project-directory", root, "--env-file", noEnv, "-f", file}, args...)...)
	cmd.Dir = root
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "COMPOSE_") && !strings.HasPrefix(kv, "DOCKER_") && !strings.HasPrefix(kv, "SPIDERPOOL_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("docker compose %s: still running after a minute; stderr %q", strings.Join(args, " "), errOut.String())
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("docker compose %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errOut.String(), err
}
