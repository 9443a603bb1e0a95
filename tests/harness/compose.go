package harness

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"

	"github.com/spiderpool/spiderpool/devstack"
)

// LoadCompose reads a compose file as `docker compose config` does, with
// compose's own loader (compose-go, the library docker compose is built
// on), in process: the file is checked against the compose schema (an
// unknown key fails), interpolated (a ${VAR:?message} left unset fails),
// normalised, checked for consistency (every service, volume, network
// and secret a service names is defined; container names are unique),
// and its services' environments are resolved. A relative file and the
// relative paths in it resolve against the repository.
//
// The file is read as a newcomer's machine reads it: with no .env file
// and none of the caller's COMPOSE_*, DOCKER_* or SPIDERPOOL_* variables.
// err says what was wrong with the file, naming the key or variable; a
// test fails at once only if the repository cannot be found.
func LoadCompose(t testing.TB, file string) (*types.Project, error) {
	t.Helper()
	root, err := devstack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if !filepath.IsAbs(file) {
		file = filepath.Join(root, file)
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "COMPOSE_") && !strings.HasPrefix(kv, "DOCKER_") && !strings.HasPrefix(kv, "SPIDERPOOL_") {
			env = append(env, kv)
		}
	}
	opts, err := cli.NewProjectOptions([]string{file},
		cli.WithWorkingDirectory(root),
		cli.WithEnv(env),
		cli.WithInterpolation(true),
		cli.WithNormalization(true),
		cli.WithConsistency(true),
		cli.WithResolvedPaths(true),
		cli.WithDiscardEnvFile,
		cli.WithoutUnnecessaryResources,
	)
	if err != nil {
		return nil, err
	}
	project, err := opts.LoadProject(context.Background())
	if err != nil {
		return nil, err
	}
	if project, err = project.WithServicesEnvironmentResolved(true); err != nil {
		return nil, err
	}
	if err := project.CheckContainerNameUnicity(); err != nil {
		return nil, err
	}
	return project, nil
}
