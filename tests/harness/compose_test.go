package harness

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spiderpool/spiderpool/devstack"
)

// writeCompose writes a compose file into a temporary directory.
func writeCompose(t *testing.T, text string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "compose.yml")
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// TestLoadComposeRejectsWhatComposeRejects: each file here fails
// `docker compose config` (docker compose v5.6.0; its message above each
// case), and LoadCompose fails on it too, naming the culprit.
func TestLoadComposeRejectsWhatComposeRejects(t *testing.T) {
	t.Setenv("SPIDERPOOL_SET_BY_CALLER", "set")
	for _, c := range []struct {
		name, file, culprit string
	}{
		// validating ...: services.a.no_such_key false schema
		{"unknown key", "services:\n  a:\n    image: x\n    no_such_key: true\n", "no_such_key"},
		// error while interpolating services.a.image: required variable NO_SUCH_VARIABLE is missing a value: must be set
		{"required variable unset", "services:\n  a:\n    image: ${NO_SUCH_VARIABLE:?must be set}\n", "NO_SUCH_VARIABLE"},
		// (the same, with the caller's SPIDERPOOL_ variables left out)
		{"caller's SPIDERPOOL_ variable unseen", "services:\n  a:\n    image: ${SPIDERPOOL_SET_BY_CALLER:?must be set}\n", "SPIDERPOOL_SET_BY_CALLER"},
		// service "a" refers to undefined volume nosuch: invalid compose project
		{"undefined volume", "services:\n  a:\n    image: x\n    volumes: [nosuch:/x]\n", "nosuch"},
		// service "a" depends on undefined service "b": invalid compose project
		{"undefined service", "services:\n  a:\n    image: x\n    depends_on: [b]\n", `"b"`},
		// validating ...: services.a.ports must be a array
		{"wrong type", "services:\n  a:\n    image: x\n    ports: {web: 80}\n", "ports"},
		// services.b: container name "same" is already in use by service {}"
		{"duplicate container name", "services:\n  a:\n    image: x\n    container_name: same\n  b:\n    image: x\n    container_name: same\n", "same"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := LoadCompose(t, writeCompose(t, c.file))
			if err == nil {
				t.Fatalf("LoadCompose accepted\n%s", c.file)
			}
			if !strings.Contains(err.Error(), c.culprit) {
				t.Errorf("LoadCompose failed without naming %s: %v", c.culprit, err)
			}
		})
	}
}

// TestLoadComposeRendersAsCompose: the caller's SPIDERPOOL_ variables are
// not seen (the defaults are), its other variables are, $$ is a dollar,
// and a relative bind mount is a path in the repository.
func TestLoadComposeRendersAsCompose(t *testing.T) {
	t.Setenv("SPIDERPOOL_IMAGE", "someone-elses:image")
	file := writeCompose(t, `name: sample
services:
  a:
    image: ${SPIDERPOOL_IMAGE:-spiderpool:local}
    command: ["sh", "-c", "echo $${HOME}"]
    environment:
      HOME_FROM_CALLER: ${HOME}
    volumes: [./deploy:/deploy:ro]
    ports: ["${SPIDERPOOL_PUBLISH_ADDR:-127.0.0.1}:9101:9090"]
`)
	t.Setenv("SPIDERPOOL_PUBLISH_ADDR", "0.0.0.0")
	p, err := LoadCompose(t, file)
	if err != nil {
		t.Fatal(err)
	}
	a := p.Services["a"]
	if a.Image != "spiderpool:local" {
		t.Errorf("image %q, want the default spiderpool:local", a.Image)
	}
	if got := strings.Join(a.Command, " "); got != "sh -c echo ${HOME}" {
		t.Errorf("command %q, want $$ rendered as $", got)
	}
	if got := a.Environment.ToMapping()["HOME_FROM_CALLER"]; got != os.Getenv("HOME") {
		t.Errorf("HOME_FROM_CALLER %q, want the caller's HOME %q", got, os.Getenv("HOME"))
	}
	root, err := devstack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Volumes) != 1 || a.Volumes[0].Source != filepath.Join(root, "deploy") {
		t.Errorf("volumes %+v, want ./deploy as %s", a.Volumes, filepath.Join(root, "deploy"))
	}
	if len(a.Ports) != 1 || a.Ports[0].HostIP != "127.0.0.1" || a.Ports[0].Published != "9101" || a.Ports[0].Target != 9090 {
		t.Errorf("ports %+v, want 127.0.0.1:9101 to 9090", a.Ports)
	}
}
