package integration

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/tests/harness"
	"github.com/spiderpool/spiderpool/tests/synthweb"
)

// TestAddURLsToARunningCampaign is issue 15's acceptance 1: 500 URLs
// added to a running campaign, through the CLI from a file: 300 new (a
// second site nothing links to), 100 the campaign knows already, 100 on a
// host out of scope. Each is reported as what it is, and every new one is
// fetched exactly once. The Temporal CLI adds through the same update.
func TestAddURLsToARunningCampaign(t *testing.T) {
	crawled := startWeb(t, synthweb.Config{Hosts: 1, Pages: 2000, LinksPerPage: 2, Seed: 15})
	unlinked := startWeb(t, synthweb.Config{Hosts: 1, Pages: 300, LinksPerPage: 2, Seed: 16})
	s := harness.NewStack(t)
	s.StartNode("a", 1)
	id := "add-" + s.Name
	spec := campaign.Spec{
		Seeds:      []string{crawled.Seed()},
		Scope:      campaign.Scope{AllowedDomains: []string{"127.0.0.1"}},
		Politeness: campaign.Politeness{MinDelay: campaign.Duration(10 * time.Millisecond), MaxConcurrencyPerHost: 1},
	}
	r, err := s.Campaigns.Start(bg, id, spec)
	if err != nil {
		t.Fatal(err)
	}
	var known []string
	harness.Eventually(t, time.Minute, "100 URLs known to the campaign", func() bool {
		known = s.Strings(`SELECT url FROM frontier WHERE campaign = (SELECT key FROM campaigns WHERE id = $1) ORDER BY id LIMIT 100`, id)
		return len(known) == 100
	})
	want := map[string]string{}
	var lines []string
	for i := range 300 {
		u := unlinked.URL(0, i)
		lines, want[u] = append(lines, u), campaign.AddedNew
	}
	for _, u := range known {
		lines, want[u] = append(lines, u), campaign.AddedDuplicate
	}
	for i := range 100 {
		u := fmt.Sprintf("http://elsewhere.example/p/%d.html", i)
		lines, want[u] = append(lines, u), campaign.AddedOutOfScope
	}
	common := []string{"--temporal-address", harness.Temporal(t).Address(), "--database-url", s.Config.DatabaseURL,
		"--control-queue", s.Config.ControlQueue}
	out := runCmd(t, "# 500 URLs\n"+strings.Join(lines, "\n")+"\n", spiderpoolBin(t),
		append([]string{"campaign", "add", id, "--file", "-", "--json"}, common...)...)
	if out.code != 0 {
		t.Fatalf("campaign add: exit %d: %s", out.code, out.stderr)
	}
	var got struct {
		Added campaign.AddURLsResult `json:"added"`
	}
	if err := json.Unmarshal([]byte(out.stdout), &got); err != nil {
		t.Fatalf("campaign add --json printed %q: %v", out.stdout, err)
	}
	if len(got.Added.URLs) != 500 {
		t.Fatalf("%d URLs reported, want 500", len(got.Added.URLs))
	}
	for _, u := range got.Added.URLs {
		if u.Result != want[u.URL] {
			t.Errorf("%s reported %s (%s), want %s", u.URL, u.Result, u.Reason, want[u.URL])
		}
	}
	if a := got.Added; a.New != 300 || a.Duplicate != 100 || a.OutOfScope != 100 || a.Invalid != 0 {
		t.Errorf("counts %d new, %d duplicate, %d out of scope, %d invalid; want 300, 100, 100, 0",
			a.New, a.Duplicate, a.OutOfScope, a.Invalid)
	}

	// The Temporal CLI, through the same update: a URL known by now and
	// one that is not a URL.
	tout := runCmd(t, "", temporalCLI(t), "workflow", "update", "execute", "--address", harness.Temporal(t).Address(),
		"--workflow-id", id, "--name", campaign.AddURLs, "-o", "json",
		"--input", `{"urls": ["`+unlinked.URL(0, 0)+`", "ftp://nowhere/"]}`)
	if tout.code != 0 {
		t.Fatalf("temporal workflow update execute: exit %d: %s %s", tout.code, tout.stdout, tout.stderr)
	}
	var viaCLI struct {
		Result campaign.AddURLsResult `json:"result"`
	}
	if err := json.Unmarshal([]byte(tout.stdout), &viaCLI); err != nil || viaCLI.Result.Duplicate != 1 || viaCLI.Result.Invalid != 1 {
		t.Errorf("temporal workflow update printed %q (%v): want 1 duplicate and 1 invalid", tout.stdout, err)
	}

	sum, err := s.Campaigns.Result(bounded(t, 3*time.Minute), id)
	if err != nil {
		t.Fatalf("campaign: %v (%v)", err, r.GetRunID())
	}
	if missing, dup := unlinked.Tally(); missing != 0 || dup != 0 {
		t.Errorf("of the 300 added pages, %d never requested, %d requested more than once", missing, dup)
	}
	if missing, dup := crawled.Tally(); missing != 0 || dup != 0 {
		t.Errorf("the crawled site: %d pages never requested, %d more than once", missing, dup)
	}
	if wantPages := int64(2000 + 300); sum.Fetched != wantPages {
		t.Errorf("fetched %d pages, want %d", sum.Fetched, wantPages)
	}
}
