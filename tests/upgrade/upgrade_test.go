package upgrade

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/tests/harness"
	"github.com/spiderpool/spiderpool/tests/synthweb"
)

func TestMain(m *testing.M) { harness.Main(m) }

// upgradeWeb is the web both releases crawl: 4,000 pages over 24 hosts.
func upgradeWeb(t *testing.T, seed int64) *synthweb.Web {
	t.Helper()
	return harness.StartWeb(t, synthweb.Config{
		Hosts: 24, Pages: 4000, LinksPerPage: 6, CrossHostFraction: 0.3, Seed: seed, Latency: 2 * time.Millisecond,
	})
}

// specFor is a spec both releases read: only fields v0.1.0 knows. Paced
// (100ms between requests to a host) so the crawl outlasts the node
// changes, with small batches and a quick membership refresh so joining
// and leaving nodes show up within seconds.
func specFor(w *synthweb.Web, maxHistoryEvents int) string {
	return fmt.Sprintf(`{"seeds":[%q],"scope":{"allowed_domains":["127.0.0.1"]},
		"politeness":{"max_concurrency_per_host":1,"min_delay":"100ms"},
		"dispatch":{"batch_size":20,"membership_refresh":"2s","max_history_events":%d}}`, w.Seed(), maxHistoryEvents)
}

// pagesBy counts pages fetched by the nodes.
func (c *cluster) pagesBy(nodes ...*node) int64 {
	ids := make([]string, len(nodes))
	for i, n := range nodes {
		ids[i] = n.id
	}
	return c.count(`SELECT count(*) FROM pages WHERE node = ANY($1)`, ids)
}

// stopMidCrawl stops the nodes cleanly (SIGTERM, as an orchestrator
// replacing them does) and returns the URLs they held while stopping:
// leased to them from just before the signal until they exited. Only
// these may be fetched twice.
func (c *cluster) stopMidCrawl(nodes ...*node) map[string]bool {
	c.t.Helper()
	ids := make([]string, len(nodes))
	for i, n := range nodes {
		ids[i] = n.id
	}
	held := map[string]bool{}
	sample := func() {
		for _, u := range c.strings(`SELECT url FROM frontier WHERE state = 'leased' AND node = ANY($1)`, ids) {
			held[u] = true
		}
	}
	sample()
	for _, n := range nodes {
		_ = n.cmd.Process.Signal(syscall.SIGTERM)
	}
	harness.Eventually(c.t, time.Minute, "the stopped nodes to exit", func() bool {
		sample()
		for _, n := range nodes {
			if !n.exited() {
				return false
			}
		}
		return true
	})
	return held
}

// result waits for the campaign's last run to end.
func (c *cluster) result(id string, within time.Duration) campaign.Summary {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(bg, within)
	defer cancel()
	var sum campaign.Summary
	if err := c.tc.GetWorkflow(ctx, id, "").Get(ctx, &sum); err != nil {
		desc := describeRuns(c.runs(id))
		c.t.Fatalf("campaign %s: %v\nfrontier: %v\n%s\n%s", id, err,
			c.strings(`SELECT state::text || ' ' || count(*) FROM frontier GROUP BY state`), desc, c.describe(id))
	}
	return sum
}

// checkOnce holds the campaign to the invariant: every page fetched, and
// none fetched twice unless a stopped node held it.
func (c *cluster) checkOnce(w *synthweb.Web, sum campaign.Summary, held map[string]bool) (again int) {
	t := c.t
	t.Helper()
	hits := w.Hits()
	var missing, extra []string
	for _, p := range w.Pages() {
		switch n := hits[p]; {
		case n == 0:
			missing = append(missing, p)
		case n > w.ExpectedHits(p) && held[p]:
			again++
		case n > w.ExpectedHits(p):
			extra = append(extra, p)
		}
	}
	sort.Strings(extra)
	if len(missing) > 0 {
		t.Errorf("%d pages never fetched, e.g. %v", len(missing), missing[:min(3, len(missing))])
	}
	if len(extra) > 0 {
		t.Errorf("%d pages fetched twice that no stopped node held, e.g.\n%s", len(extra), c.whyTwice(w, extra[:min(5, len(extra))]))
	}
	if sum.Fetched != int64(len(w.Pages())) || sum.Pending != 0 || sum.Leased != 0 {
		t.Errorf("summary %+v, want all %d pages fetched and nothing left", sum, len(w.Pages()))
	}
	return again
}

// whyTwice tells the story of pages fetched twice: when the web served
// them, and what Postgres says of them.
func (c *cluster) whyTwice(w *synthweb.Web, urls []string) string {
	var b strings.Builder
	for _, u := range urls {
		host, path, _ := strings.Cut(strings.TrimPrefix(u, "http://"), "/")
		var at []string
		for _, r := range w.Log(host) {
			if r.Path == "/"+path {
				at = append(at, r.At.Format("15:04:05.000"))
			}
		}
		fmt.Fprintf(&b, "  %s requested at %v; %v\n", u, at, c.strings(`
			SELECT 'frontier node ' || coalesce(f.node, '-') || ' lease ' || coalesce(f.lease_id::text, '-') ||
				' holder ' || coalesce(f.lease_holder, '-') || ' attempts ' || f.attempts ||
				'; page by ' || coalesce(p.node, '-') || ' at ' || coalesce(to_char(p.fetched_at, 'HH24:MI:SS.MS'), '-')
			FROM frontier f LEFT JOIN pages p ON p.url_id = f.id WHERE f.url = $1`, u))
	}
	return b.String()
}

// describeRuns says which dispatcher each run took, which nodes ran its
// workflow tasks, and which of them failed.
func describeRuns(runs []runFacts) string {
	var parts []string
	for i, r := range runs {
		d := "v0.1.0 dispatcher"
		if r.current {
			d = "current dispatcher"
		}
		s := fmt.Sprintf("run %d: %s, %d events, workflow tasks by node %v", i+1, d, r.events, r.tasksBy)
		if len(r.taskFailures) > 0 {
			s += fmt.Sprintf(", workflow task failures %v", r.taskFailures)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// TestRollingUpgradeOfARunningCampaign is the rolling upgrade, for real: a
// campaign started while only v0.1.0 nodes run, nodes of this tree joining
// (migrating the schema under the old ones), both serving the campaign,
// then the old nodes stopped mid-crawl. The campaign completes with every
// page fetched once, except the pages the stopped nodes held.
func TestRollingUpgradeOfARunningCampaign(t *testing.T) {
	old, cur := releaseBinary(t), harness.Binary(t)
	w := upgradeWeb(t, 31)
	c := newCluster(t, "roll")
	o1 := c.startNode(old, PreviousRelease, "old1", 1)
	o2 := c.startNode(old, PreviousRelease, "old2", 1)
	id := "rolling-" + c.name
	c.cli(old, specFor(w, 500), "campaign", "start", "--spec", "-", "--id", id)
	harness.Eventually(t, 2*time.Minute, "the v0.1.0 nodes to fetch 600 pages", func() bool {
		return c.pagesBy(o1, o2) >= 600
	})

	n1 := c.startNode(cur, "current", "new1", 1)
	n2 := c.startNode(cur, "current", "new2", 1)
	oldAtJoin := c.pagesBy(o1, o2)
	harness.Eventually(t, 2*time.Minute, "the new nodes to fetch 300 pages beside the old ones", func() bool {
		return c.pagesBy(n1, n2) >= 300 && c.pagesBy(o1, o2) > oldAtJoin
	})
	mixed := c.pagesBy(o1, o2) - oldAtJoin
	held := c.stopMidCrawl(o1, o2)
	stoppedAt := c.count(`SELECT count(*) FROM pages`)

	sum := c.result(id, 2*time.Minute)
	again := c.checkOnce(w, sum, held)
	runs := c.runs(id)
	if runs[0].current {
		t.Errorf("the campaign started under v0.1.0 nodes ran the current dispatcher in its first run")
	}
	t.Logf("%d pages: %d by v0.1.0 nodes before the join, %d by them beside the new ones, stopped at %d; new nodes %d; "+
		"the stopped nodes held %d URLs, %d pages fetched again; %s",
		sum.Fetched, oldAtJoin, mixed, stoppedAt, c.pagesBy(n1, n2), len(held), again, describeRuns(runs))
}

// TestNewRunBesideOldNodes: a run of this release's dispatcher (a pool
// run) while v0.1.0 nodes still run (they joined after it started, as a
// node restarted with the old release mid-rollout would). The old nodes
// poll the same control queue, so when the run loses its sticky worker (a
// cache eviction, a restart, a slow worker: forced here with
// ResetStickyTaskQueue) a v0.1.0 worker may take its workflow task, and
// v0.1.0 code cannot replay this release's history: the task fails and
// goes to a new node. The old nodes get none of its batches: they do not
// take batches from Postgres (they declare no campaign.CapPull), so a pool
// run leaves them out of its ring, and their hosts are the new nodes'.
// Then they are stopped mid-crawl; the campaign completes with every page
// fetched once.
func TestNewRunBesideOldNodes(t *testing.T) {
	old, cur := releaseBinary(t), harness.Binary(t)
	w := upgradeWeb(t, 37)
	c := newCluster(t, "mixed")
	n1 := c.startNode(cur, "current", "new1", 1)
	n2 := c.startNode(cur, "current", "new2", 1)
	id := "mixed-" + c.name
	c.cli(cur, specFor(w, 10000), "campaign", "start", "--spec", "-", "--id", id)
	harness.Eventually(t, time.Minute, "the campaign to start under the current dispatcher", func() bool {
		return c.runs(id)[0].current
	})
	o1 := c.startNode(old, PreviousRelease, "old1", 1)
	o2 := c.startNode(old, PreviousRelease, "old2", 1)
	atJoin := c.pagesBy(n1, n2)
	harness.Eventually(t, 2*time.Minute, "the new nodes to fetch 300 more pages beside the v0.1.0 ones", func() bool {
		return c.pagesBy(n1, n2) >= atJoin+300
	})

	// Take the run off its sticky worker until a v0.1.0 worker has been
	// offered one of its workflow tasks, or ten times.
	tasks := func(nodes ...*node) int {
		n := 0
		for _, r := range c.runs(id) {
			for who, k := range r.tasksBy {
				if len(nodes) == 0 || slices.ContainsFunc(nodes, func(n *node) bool { return n.id == who }) {
					n += k
				}
			}
		}
		return n
	}
	resets := 0
	for ; resets < 10 && tasks(o1, o2) == 0; resets++ {
		before := tasks()
		c.resetSticky(id)
		harness.Eventually(t, time.Minute, "a workflow task after the sticky reset", func() bool {
			return tasks() > before
		})
	}
	byOld, byNew := c.pagesBy(o1, o2), c.pagesBy(n1, n2)
	held := c.stopMidCrawl(o1, o2)

	sum := c.result(id, 2*time.Minute)
	again := c.checkOnce(w, sum, held)
	if byOld != 0 || c.pagesBy(o1, o2) != 0 {
		t.Errorf("the v0.1.0 nodes fetched %d pages of a pool run: they cannot take its batches, and must get none", c.pagesBy(o1, o2))
	}
	t.Logf("%d pages; before the stop %d by v0.1.0 nodes, %d by new ones; %d sticky resets, %d workflow tasks offered to v0.1.0 workers; "+
		"the stopped nodes held %d URLs, %d pages fetched again; %s",
		sum.Fetched, byOld, byNew, resets, tasks(o1, o2), len(held), again, describeRuns(c.runs(id)))
}

// TestSpecFromNewerVersionRuns (issue 11, defect 10): a campaign whose
// spec carries fields a later release adds, started as that release's CLI
// or `temporal workflow start --input` would, runs on this release's nodes
// with the fields it knows, and the stored spec keeps the others for the
// nodes that know them.
func TestSpecFromNewerVersionRuns(t *testing.T) {
	w := harness.StartWeb(t, synthweb.Config{Hosts: 2, Pages: 60, LinksPerPage: 3, Seed: 41})
	s := harness.NewStack(t)
	s.StartNode("a", 1)
	id := "newer-spec-" + s.Name
	input := json.RawMessage(fmt.Sprintf(`{"seeds":[%q],"scope":{"allowed_domains":["127.0.0.1"],"follow_canonical":true},
		"crawl_budget":{"usd":5},"limits":{"max_pages":30}}`, w.Seed()))
	run, err := s.Client.ExecuteWorkflow(bg, client.StartWorkflowOptions{ID: id, TaskQueue: s.Config.ControlQueue},
		campaign.WorkflowType, input)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg, 2*time.Minute)
	defer cancel()
	var sum campaign.Summary
	if err := run.Get(ctx, &sum); err != nil {
		t.Fatalf("a spec with fields of a newer release: %v", err)
	}
	if sum.Fetched != 30 {
		t.Errorf("fetched %d pages, want limits.max_pages, 30: the fields this release knows apply", sum.Fetched)
	}
	var stored struct {
		Scope       map[string]any `json:"scope"`
		CrawlBudget map[string]any `json:"crawl_budget"`
	}
	var doc []byte
	if err := s.Store.Pool().QueryRow(ctx, `SELECT spec FROM campaigns WHERE id = $1`, id).Scan(&doc); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(doc, &stored); err != nil {
		t.Fatal(err)
	}
	if stored.Scope["follow_canonical"] != true || stored.CrawlBudget["usd"] != float64(5) {
		t.Errorf("the stored spec lost the newer fields: %s", doc)
	}
}
