package processor

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportsNoNodeMachinery keeps the user's API light: a processor built
// on this package links no Postgres store, no workflow or activity code
// and no node wiring (workers, fx). The in-process node lives in package colocate.
func TestImportsNoNodeMachinery(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	gotool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list the imports with")
	}
	// Each line: a package this one depends on, then what it imports.
	out, err := exec.Command(gotool, "list", "-deps", "-f", `{{.ImportPath}} {{join .Imports " "}}`, ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	const module = "github.com/spiderpool/spiderpool/"
	forbidden := []string{module + "store", module + "workflows", module + "activities", module + "workers", "go.uber.org/fx"}
	below := func(pkg, root string) bool { return pkg == root || strings.HasPrefix(pkg, root+"/") }
	for line := range strings.Lines(string(out)) {
		pkg, imports, _ := strings.Cut(strings.TrimSpace(line), " ")
		for _, imp := range strings.Fields(imports) {
			for _, f := range forbidden {
				if below(imp, f) && !below(pkg, f) {
					t.Errorf("processor depends on %s, through %s; keep node machinery out of the user's API", imp, pkg)
				}
			}
		}
	}
}
