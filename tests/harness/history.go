package harness

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/temporalproto"
	"go.temporal.io/sdk/client"

	"github.com/spiderpool/spiderpool/control"
	"github.com/spiderpool/spiderpool/devstack"
)

// RecordHistory writes the workflow's (latest run's) history to
// workflows/testdata/<set>/<name>.json when SPIDERPOOL_RECORD_HISTORIES
// names the set (the release being made, e.g. v0.2.0), for the replay
// tests to guard. A history once recorded is never written over: the
// histories of every release stay, and replay guards them all.
func RecordHistory(t testing.TB, c client.Client, workflowID, name string) {
	t.Helper()
	set := os.Getenv("SPIDERPOOL_RECORD_HISTORIES")
	if set == "" {
		return
	}
	if !validSet(set) {
		t.Fatalf("SPIDERPOOL_RECORD_HISTORIES=%q: want the name of a history set, like v0.2.0", set)
	}
	var h historypb.History
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	it := c.GetWorkflowHistory(ctx, workflowID, "", false, 0)
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
	dir := filepath.Join(root, "workflows", "testdata", set)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name+".json")
	// O_EXCL: an existing history is a released one; record a new set.
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		t.Fatalf("%v: recorded histories are never written over; record into a new set", err)
	}
	defer out.Close()
	if _, err := out.Write(append(doc, '\n')); err != nil {
		t.Fatal(err)
	}
	// The replay needs the workflow ID, which the events do not carry.
	if err := os.WriteFile(filepath.Join(dir, name+".id"), []byte(workflowID+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("recorded %d events of %s in %s", len(h.Events), workflowID, path)
}

// validSet accepts a history set's name: a folder of letters, digits, '.',
// '_' and '-'.
func validSet(s string) bool {
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return s != "" && s != "." && s != ".."
}

// HistoryCost is what a campaign cost its Temporal histories.
type HistoryCost = control.HistoryCost

// PerThousand scales a count to a campaign's thousand pages.
func PerThousand(n int, pages int64) float64 {
	if pages == 0 {
		return 0
	}
	return float64(n) * 1000 / float64(pages)
}

// CampaignHistoryCost reads the histories of every run of the campaign
// workflowID and of their children, waiting up to a minute for
// visibility to list them all closed.
func CampaignHistoryCost(t testing.TB, c client.Client, workflowID string) HistoryCost {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cost, err := control.CampaignHistoryCost(ctx, c, workflowID, 1)
	if err != nil {
		t.Fatal(err)
	}
	return cost
}
