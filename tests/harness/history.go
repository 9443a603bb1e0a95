package harness

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/temporalproto"
	"go.temporal.io/sdk/client"

	"github.com/spiderpool/spiderpool/devstack"
)

// RecordHistory writes the workflow's (latest run's) history to
// workflows/testdata/<name>.json when SPIDERPOOL_RECORD_HISTORIES=1, for
// the replay tests to guard. `make histories` re-records them all.
func RecordHistory(t testing.TB, c client.Client, workflowID, name string) {
	t.Helper()
	if os.Getenv("SPIDERPOOL_RECORD_HISTORIES") != "1" {
		return
	}
	var h historypb.History
	it := c.GetWorkflowHistory(context.Background(), workflowID, "", false, 0)
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			t.Fatalf("history of %s: %v", workflowID, err)
		}
		h.Events = append(h.Events, e)
	}
	doc, err := temporalproto.CustomJSONMarshalOptions{Indent: "  "}.Marshal(&h)
	if err != nil {
		t.Fatal(err)
	}
	root, err := devstack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, "workflows", "testdata", name+".json")
	if err := os.WriteFile(path, append(doc, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	// The replay needs the workflow ID, which the events do not carry.
	if err := os.WriteFile(filepath.Join(root, "workflows", "testdata", name+".id"), []byte(workflowID+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("recorded %d events of %s in %s", len(h.Events), workflowID, path)
}
