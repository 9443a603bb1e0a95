package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/control"
	"github.com/spiderpool/spiderpool/devstack"
	"github.com/spiderpool/spiderpool/store"
	"github.com/spiderpool/spiderpool/tests/harness"
	"github.com/spiderpool/spiderpool/tests/synthweb"
)

// runCmd runs a command (ours or the Temporal CLI) to its end, two
// minutes at most, with none of the caller's DATABASE_URL or
// TEMPORAL_ADDRESS.
func runCmd(t *testing.T, stdin string, name string, args ...string) harness.CommandResult {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Env = append(os.Environ(), "DATABASE_URL=", "TEMPORAL_ADDRESS=")
	return harness.RunCommand(t, 2*time.Minute, cmd)
}

func temporalCLI(t *testing.T) string {
	t.Helper()
	bin, err := devstack.FindTemporalBin()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// TestTemporalCLIStartsCampaignWithDefaults: the Temporal CLI starts a
// working campaign from seeds alone, and the status query answers through
// it too.
func TestTemporalCLIStartsCampaignWithDefaults(t *testing.T) {
	web := harness.StartWeb(t, synthweb.Config{Hosts: 4, Pages: 200, LinksPerPage: 4, CrossHostFraction: 0.3, Seed: 3})
	s := harness.NewStack(t)
	s.StartNode("a", 1)
	s.StartNode("b", 1)
	tcli := temporalCLI(t)
	addr := harness.Temporal(t).Address()
	id := "tcli-" + s.Name
	r := runCmd(t, "", tcli, "workflow", "start", "--address", addr, "--type", campaign.WorkflowType,
		"--task-queue", s.Config.ControlQueue, "--workflow-id", id, "--input", `{"seeds":["`+web.Seed()+`"]}`)
	if r.Code != 0 {
		t.Fatalf("temporal workflow start: %s %s", r.Stdout, r.Stderr)
	}
	q := runCmd(t, "", tcli, "workflow", "query", "--address", addr, "--workflow-id", id, "--type", campaign.StatusQuery, "-o", "json")
	if q.Code != 0 {
		t.Fatalf("temporal workflow query: %s %s", q.Stdout, q.Stderr)
	}
	var answer struct {
		QueryResult []campaign.Status `json:"queryResult"`
	}
	if err := json.Unmarshal([]byte(q.Stdout), &answer); err != nil || len(answer.QueryResult) != 1 || answer.QueryResult[0].CampaignID != id {
		t.Fatalf("query output %q (%v)", q.Stdout, err)
	}
	sum, err := s.Campaigns.Result(bounded(t, 2*time.Minute), id)
	if err != nil {
		t.Fatal(err)
	}
	// Default scope is the seed's host: all of host 0, nothing else.
	host0 := 0
	for _, p := range web.Pages() {
		if strings.HasPrefix(p, "http://"+web.Hosts()[0]+"/") {
			host0++
		}
	}
	if sum.Fetched != int64(host0) || sum.Failed != 0 {
		t.Fatalf("summary %+v, want the %d pages of the seed host", sum, host0)
	}
	harness.RecordHistory(t, s.Client, id, "temporal_cli_defaults")
	t.Logf("started by the Temporal CLI with defaults: %d pages fetched; status answered run %d state %q",
		sum.Fetched, answer.QueryResult[0].Run, answer.QueryResult[0].State)
}

// TestBadInputIsNamedAndHarmless: bad specs and signals, from our CLI and
// Temporal's, get errors naming the field, and a running campaign is
// unharmed. (How commands fail without Postgres or Temporal is tests/cli's
// TestCommandsFailFastWithoutServers.)
func TestBadInputIsNamedAndHarmless(t *testing.T) {
	bin := harness.Binary(t)
	s := harness.NewStack(t)
	addr := harness.Temporal(t).Address()
	common := []string{"--temporal-address", addr, "--database-url", s.Config.DatabaseURL, "--control-queue", s.Config.ControlQueue}

	for _, tc := range []struct{ spec, field, problem string }{
		{`{"seeds":[]}`, "spec.seeds", "at least one seed URL is required"},
		{`{"seeds":["ftp://example.org/"]}`, "spec.seeds[0]", "is not an http(s) URL"},
		{`{"seeds":["http://127.0.0.1:1/"],"limits":{"max_pages":-5}}`, "spec.limits.max_pages", "must be >= 0, got -5"},
		{`{"seeds":["http://127.0.0.1:1/"],"limit":{}}`, "spec", `unknown field "limit"`},
	} {
		r := runCmd(t, tc.spec, bin, append([]string{"campaign", "start", "--spec", "-", "--id", "bad-" + s.Name}, common...)...)
		if r.Code == 0 || !strings.Contains(r.Stderr, tc.field+": ") || !strings.Contains(r.Stderr, tc.problem) {
			t.Errorf("spec %s: exit %d, stderr %q; want an error naming %s", tc.spec, r.Code, r.Stderr, tc.field)
		}
	}
	if _, err := s.Campaigns.Status(bg, "bad-"+s.Name); err == nil {
		t.Error("a refused spec started a campaign")
	}

	// The same specs through the Temporal CLI, which has no validation of
	// its own: the workflow fails at once, naming the fields.
	tcli := temporalCLI(t)
	for i, tc := range []struct{ spec, want string }{
		{`{}`, "spec.seeds: at least one seed URL is required"},
		{`{"seeds":["mailto:x@y.z"],"limits":{"max_pages":-1}}`, "spec.limits.max_pages: must be >= 0"},
	} {
		id := "bad-tcli-" + strconv.Itoa(i) + "-" + s.Name
		r := runCmd(t, "", tcli, "workflow", "start", "--address", addr, "--type", campaign.WorkflowType,
			"--task-queue", s.Config.ControlQueue, "--workflow-id", id, "--input", tc.spec)
		if r.Code != 0 {
			t.Fatalf("temporal workflow start: %s", r.Stderr)
		}
		s.StartNode("n"+strconv.Itoa(i), 1) // a worker to run it
		_, err := s.Campaigns.Result(bounded(t, time.Minute), id)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("workflow with spec %s ended with %v, want %q", tc.spec, err, tc.want)
		}
	}

	// A running campaign shrugs off a bad signal.
	web := harness.StartWeb(t, synthweb.Config{Hosts: 3, Pages: 150, LinksPerPage: 4, CrossHostFraction: 0.5, Seed: 5})
	id := "steady-" + s.Name
	spec := loopbackSpec(web)
	spec.Politeness = campaign.Politeness{MinDelay: campaign.Duration(20 * time.Millisecond), MaxConcurrencyPerHost: 1}
	running, err := s.Campaigns.Start(bg, id, spec)
	if err != nil {
		t.Fatal(err)
	}
	waitFetched(t, s, id, 5)
	// Paused from the CLI (so it cannot end while bad signals arrive): the
	// workflow says paused, and its search attribute too.
	if r := runCmd(t, "", bin, append([]string{"campaign", "pause", id}, common...)...); r.Code != 0 {
		t.Fatalf("campaign pause: exit %d, stderr %q", r.Code, r.Stderr)
	}
	if st, err := s.Campaigns.Status(bg, id); err != nil || st.State != "paused" {
		t.Fatalf("after pause: state %q, err %v", st.State, err)
	}
	harness.Eventually(t, time.Minute, "CampaignStatus=Paused in visibility", func() bool {
		list, err := s.Campaigns.List(bg, campaign.StatusPaused, 10)
		return err == nil && len(list) == 1 && list[0].ID == id
	})
	r := runCmd(t, "", bin, append([]string{"campaign", "reweight", id, "ghost", "2"}, common...)...)
	if r.Code == 0 || !strings.Contains(r.Stderr, `node: unknown node "ghost"`) {
		t.Errorf("reweight of an unknown node: exit %d, stderr %q", r.Code, r.Stderr)
	}
	r = runCmd(t, "", bin, append(append([]string{"campaign", "reweight"}, common...), id, s.NodeID("n0"), "--", "-3")...)
	if r.Code == 0 || !strings.Contains(r.Stderr, "weight: weight must be a finite number >= 0, got -3") {
		t.Errorf("negative weight: exit %d, stderr %q", r.Code, r.Stderr)
	}
	r = runCmd(t, "", tcli, "workflow", "signal", "--address", addr, "--workflow-id", id, "--name", campaign.Drain, "--input", `{"node":"ghost"}`)
	if r.Code != 0 {
		t.Fatalf("temporal workflow signal: %s", r.Stderr)
	}
	harness.Eventually(t, time.Minute, "the rejected signal to show in status", func() bool {
		st, err := s.Campaigns.Status(bg, id)
		return err == nil && len(st.Rejected) == 1 && strings.Contains(st.Rejected[0], `unknown node "ghost"`)
	})
	if r := runCmd(t, "", bin, append([]string{"campaign", "resume", id}, common...)...); r.Code != 0 {
		t.Fatalf("campaign resume: exit %d, stderr %q", r.Code, r.Stderr)
	}
	ctx, cancel := context.WithTimeout(bg, 2*time.Minute)
	defer cancel()
	var sum campaign.Summary
	if err := running.Get(ctx, &sum); err != nil {
		t.Fatal(err)
	}
	assertExactlyOnce(t, s, web, sum)

	// The finished campaign is found by its search attributes, from the
	// Temporal CLI as from ours, with its final page count.
	harness.Eventually(t, time.Minute, "CampaignStatus=Completed in visibility", func() bool {
		r := runCmd(t, "", tcli, "workflow", "list", "--address", addr, "-o", "json",
			"--query", fmt.Sprintf(`CampaignStatus="Completed" AND WorkflowId=%q`, id))
		return r.Code == 0 && strings.Contains(r.Stdout, id)
	})
	r = runCmd(t, "", bin, append([]string{"campaign", "list", "--status", "Completed", "--json"}, common...)...)
	var listed []control.CampaignInfo
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &listed) != nil {
		t.Fatalf("campaign list: exit %d, stdout %q, stderr %q", r.Code, r.Stdout, r.Stderr)
	}
	found := false
	for _, c := range listed {
		if c.ID == id {
			found = true
			if c.Fetched == nil || *c.Fetched != sum.Fetched {
				t.Errorf("list says %s fetched %v, summary %d", id, c.Fetched, sum.Fetched)
			}
		}
	}
	if !found {
		t.Errorf("campaign list --status Completed does not list %s: %s", id, r.Stdout)
	}

	// Export writes one record per fetched page.
	r = runCmd(t, "", bin, append([]string{"campaign", "export", id}, common...)...)
	if r.Code != 0 {
		t.Fatalf("campaign export: exit %d, stderr %q", r.Code, r.Stderr)
	}
	urls := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		var rec store.PageRecord
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("export line %q: %v", line, err)
		}
		if rec.State != "fetched" || rec.Status == 0 || rec.FetchedAt == nil || urls[rec.URL] {
			t.Errorf("export record %+v: want a fetched page, once", rec)
		}
		urls[rec.URL] = true
	}
	if int64(len(urls)) != sum.Fetched {
		t.Errorf("export wrote %d pages, campaign fetched %d", len(urls), sum.Fetched)
	}
}
