package upgrade

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/processor"
	"github.com/spiderpool/spiderpool/schema"
	"github.com/spiderpool/spiderpool/tests/harness"
	"github.com/spiderpool/spiderpool/tests/synthweb"
)

func TestMain(m *testing.M) { harness.Main(m) }

// upgradeWeb is a web both releases crawl: pages over 24 hosts.
func upgradeWeb(t *testing.T, seed int64, pages int) *synthweb.Web {
	t.Helper()
	return harness.StartWeb(t, synthweb.Config{
		Hosts: 24, Pages: pages, LinksPerPage: 6, CrossHostFraction: 0.3, Seed: seed, Latency: 2 * time.Millisecond,
	})
}

// specFor is a spec both releases read: only fields PreviousRelease
// knows. Paced (100ms between requests to a host) so the crawl outlasts
// the node changes, with small batches and a quick membership refresh so
// joining and leaving nodes show up within seconds. procs are the
// processors' entries (see pageProcessor.entry).
func specFor(w *synthweb.Web, maxHistoryEvents int, procs ...string) string {
	return fmt.Sprintf(`{"seeds":[%q],"scope":{"allowed_domains":["127.0.0.1"]},
		"politeness":{"max_concurrency_per_host":1,"min_delay":"100ms"},
		"dispatch":{"batch_size":20,"membership_refresh":"2s","max_history_events":%d},
		"processors":[%s]}`, w.Seed(), maxHistoryEvents, strings.Join(procs, ","))
}

// pagesBy counts pages fetched by the nodes.
func (c *cluster) pagesBy(nodes ...*node) int64 {
	ids := make([]string, len(nodes))
	for i, n := range nodes {
		ids[i] = n.ID
	}
	return c.count(`SELECT count(*) FROM pages WHERE node = ANY($1)`, ids)
}

// migration is the latest schema migration applied to the cluster's
// database.
func (c *cluster) migration() int64 {
	return c.count(`SELECT max(version) FROM schema_migrations`)
}

// latestMigration is the latest schema migration of this tree.
func latestMigration(t *testing.T) int64 {
	t.Helper()
	files, err := fs.Glob(schema.Migrations, "migrations/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("this tree's migrations: %v (%d files)", err, len(files))
	}
	var v int64
	if _, err := fmt.Sscanf(path.Base(slices.Max(files)), "%d_", &v); err != nil {
		t.Fatalf("migration %s: %v", slices.Max(files), err)
	}
	return v
}

// stopMidCrawl stops the nodes cleanly (SIGTERM, as an orchestrator
// replacing them does) and returns the URLs they held while stopping:
// leased to them from just before the signal until they exited. Only
// these may be fetched twice.
func (c *cluster) stopMidCrawl(nodes ...*node) map[string]bool {
	c.t.Helper()
	ids := make([]string, len(nodes))
	for i, n := range nodes {
		ids[i] = n.ID
	}
	held := map[string]bool{}
	sample := func() {
		for _, u := range c.strings(`SELECT url FROM frontier WHERE state = 'leased' AND node = ANY($1)`, ids) {
			held[u] = true
		}
	}
	sample()
	for _, n := range nodes {
		_ = n.Signal(syscall.SIGTERM)
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
		desc := c.describeRuns(c.runs(id))
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
		host, rest, _ := strings.Cut(strings.TrimPrefix(u, "http://"), "/")
		var at []string
		for _, r := range w.Log(host) {
			if r.Path == "/"+rest {
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

// The dispatcher's version (workflows' hostFlowChange and poolRuns): the
// one both releases run.
const (
	hostFlowChange = "host-aware-flow"
	poolRuns       = 2
)

// checkRuns holds the campaign's runs to the support window. Every run is
// a pool run, the only dispatcher both releases run. A node of this
// release runs every run, whichever release started it, so it never fails
// a workflow task for its code (a nondeterminism, a panic). A node of the
// previous release may, in a run this release started, whose history may
// hold what it does not know (a version marker past its own, such as the
// processors change's): the task fails, and a node of this release takes
// it. Failures of other causes (an unhandled command, a lost sticky cache)
// are the server's or the SDK's, not the code's. It returns how many
// tasks the old nodes failed so.
func (c *cluster) checkRuns(runs []runFacts) (oldFailedNew int) {
	t := c.t
	t.Helper()
	for i, r := range runs {
		if v, ok := r.versions[hostFlowChange]; !ok || v != poolRuns {
			t.Errorf("run %d: %s version %d (recorded: %v), want %d: a pool run", i+1, hostFlowChange, v, ok, poolRuns)
		}
		by := c.releaseOf(r.startedBy)
		if by == "" {
			t.Errorf("run %d was started by %q, no node of the cluster", i+1, r.startedBy)
		}
		for _, f := range r.failures {
			if !codeFailure(f.cause) {
				continue
			}
			if c.releaseOf(f.node) == PreviousRelease && by == thisRelease {
				oldFailedNew++
				continue
			}
			t.Errorf("run %d (started by %s, of %s): workflow task failed by %s (of %s) with %s: "+
				"a node of this release runs every run, and one of %s the runs it starts",
				i+1, r.startedBy, by, f.node, c.releaseOf(f.node), f.cause, PreviousRelease)
		}
	}
	return oldFailedNew
}

// oldTookNew counts the workflow tasks that nodes of the previous release
// took in runs this release started.
func (c *cluster) oldTookNew(runs []runFacts) int {
	n := 0
	for _, r := range runs {
		if c.releaseOf(r.startedBy) != thisRelease {
			continue
		}
		for node, k := range r.tasksBy {
			if c.releaseOf(node) == PreviousRelease {
				n += k
			}
		}
	}
	return n
}

// codeFailure: the workflow code failed the task (it could not replay the
// history, or panicked), not the server or the SDK.
func codeFailure(cause enumspb.WorkflowTaskFailedCause) bool {
	return cause == enumspb.WORKFLOW_TASK_FAILED_CAUSE_NON_DETERMINISTIC_ERROR ||
		cause == enumspb.WORKFLOW_TASK_FAILED_CAUSE_WORKFLOW_WORKER_UNHANDLED_FAILURE
}

// describeRuns says, for each run, its version markers, the node that
// started it, which nodes ran its workflow tasks, and which failed them.
func (c *cluster) describeRuns(runs []runFacts) string {
	var parts []string
	for i, r := range runs {
		s := fmt.Sprintf("run %d: versions %v, started by %s (%s), %d events, workflow tasks by node %v",
			i+1, r.versions, r.startedBy, c.releaseOf(r.startedBy), r.events, r.tasksBy)
		if len(r.failures) > 0 {
			s += fmt.Sprintf(", failed %v", r.failures)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// pageProcessor is a user's processor, of this tree's package processor,
// run in the test on a queue of its own, as a processor keeps running
// beside the nodes through their upgrade: one item of each page, and a
// count of the pages it got.
type pageProcessor struct {
	name, queue string
	mu          sync.Mutex
	got         map[string]int
}

func (c *cluster) startProcessor(name string) *pageProcessor {
	c.t.Helper()
	p := &pageProcessor{name: name, queue: c.queue + "." + name, got: map[string]int{}}
	proc := processor.New(name).Queue(p.queue).OnPage(func(pg *processor.Page) error {
		p.mu.Lock()
		p.got[pg.URL]++
		p.mu.Unlock()
		return pg.Item(map[string]string{"url": pg.URL})
	})
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() { done <- proc.Run(ctx, processor.WithClient(c.tc)) }()
	c.t.Cleanup(func() { cancel(); <-done })
	return p
}

// entry is the processor's entry in a spec, in fields both releases know.
func (p *pageProcessor) entry() string {
	return fmt.Sprintf(`{"name":%q,"task_queue":%q,"activity":%q,"batch_size":50}`, p.name, p.queue, p.name)
}

// checkProcessed holds the processor to every page of the web, each once:
// the campaign's deliveries all done with one item each, none failed or
// left, and every page given to the processor. It returns the pages given
// to it more than once (a batch retried, a page fetched again after a
// stopped node held it).
func (c *cluster) checkProcessed(id string, w *synthweb.Web, p *pageProcessor) (again int) {
	t := c.t
	t.Helper()
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	key, err := c.st.CampaignKey(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	all, err := harness.ProcessorStatus(ctx, c.st, key)
	if err != nil {
		t.Fatal(err)
	}
	pages := int64(len(w.Pages()))
	if got := all[p.name]; got.Processed != pages || got.Items != pages || got.Failed != 0 || got.Pending != 0 || got.Leased != 0 {
		t.Errorf("processor %s: %+v, want all %d pages processed, one item each", p.name, got, pages)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var missing []string
	for _, u := range w.Pages() {
		switch n := p.got[u]; {
		case n == 0:
			missing = append(missing, u)
		case n > 1:
			again++
		}
	}
	if len(missing) > 0 {
		t.Errorf("%d pages never given to the processor, e.g. %v", len(missing), missing[:min(3, len(missing))])
	}
	return again
}

// TestRollingUpgradeOfARunningCampaign is the rolling upgrade, for real: a
// campaign started while only PreviousRelease nodes run, nodes of this
// tree joining (migrating the schema under the old ones, which go on
// fetching on it), both serving the campaign, then the old nodes stopped
// mid-crawl. Both releases run its workflow tasks: each polls the control
// queue, and each run after a continue-as-new is started by whichever
// takes its first task. The campaign completes with every page fetched
// once, except the pages the stopped nodes held.
func TestRollingUpgradeOfARunningCampaign(t *testing.T) {
	old, cur := releaseBinary(t), harness.Binary(t)
	w := upgradeWeb(t, 31, 4000)
	c := newCluster(t, "roll")
	o1 := c.startNode(old, PreviousRelease, "old1", 1)
	o2 := c.startNode(old, PreviousRelease, "old2", 1)
	oldSchema := c.migration()
	id := "rolling-" + c.name
	c.cli(old, specFor(w, 500), "campaign", "start", "--spec", "-", "--id", id)
	harness.Eventually(t, 2*time.Minute, "the "+PreviousRelease+" nodes to fetch 600 pages", func() bool {
		return c.pagesBy(o1, o2) >= 600
	})

	// This release's nodes serve bodies, behind the node secret, as in
	// production; the old ones have no such listener.
	n1 := c.startNode(cur, thisRelease, "new1", 1, "--bodies-addr", "127.0.0.1:0")
	n2 := c.startNode(cur, thisRelease, "new2", 1, "--bodies-addr", "127.0.0.1:0")
	if got, want := c.migration(), latestMigration(t); got != want {
		t.Fatalf("schema at migration %d after this tree's nodes joined, want %d", got, want)
	}
	oldAtJoin := c.pagesBy(o1, o2)
	harness.Eventually(t, 2*time.Minute, "the new nodes to fetch 300 pages, and the old ones 100 on the new schema", func() bool {
		return c.pagesBy(n1, n2) >= 300 && c.pagesBy(o1, o2) >= oldAtJoin+100
	})
	mixed := c.pagesBy(o1, o2) - oldAtJoin
	held := c.stopMidCrawl(o1, o2)
	stoppedAt := c.count(`SELECT count(*) FROM pages`)

	sum := c.result(id, 2*time.Minute)
	again := c.checkOnce(w, sum, held)
	runs := c.runs(id)
	if by := c.releaseOf(runs[0].startedBy); by != PreviousRelease {
		t.Errorf("the campaign's first run was started by %s, of %s; want a %s node", runs[0].startedBy, by, PreviousRelease)
	}
	oldTookNew, oldFailedNew := c.oldTookNew(runs), c.checkRuns(runs)
	t.Logf("%d pages: %d by %s nodes before the join (schema at migration %d), %d by them beside the new ones (migration %d), "+
		"stopped at %d; new nodes %d; the stopped nodes held %d URLs, %d pages fetched again; "+
		"%d runs, %d workflow tasks of runs this release started taken by %s nodes, %d of them failed; %s",
		sum.Fetched, oldAtJoin, PreviousRelease, oldSchema, mixed, c.migration(), stoppedAt, c.pagesBy(n1, n2), len(held), again,
		len(runs), oldTookNew, PreviousRelease, oldFailedNew, c.describeRuns(runs))
}

// TestNewRunsBesideOldNodes: two campaigns, one plain and one with a
// processor, started by this release's CLI under a node of this release;
// then PreviousRelease nodes join, as nodes restarted with the old
// release mid-rollout would: they start on a schema migrated past what
// they know, and take the runs' batches (both releases pull them from
// Postgres). Then the one new node restarts (SIGTERM, and a new one
// later): meanwhile only old workers poll the control queue, so they take
// the runs' workflow tasks. They may not replay this release's history (a
// version marker past their own, or one they expect that this release no
// longer records): such a task fails, and goes to the new node once it is
// back. Then the old nodes are stopped mid-crawl; both campaigns complete
// with every page fetched once, and the processor's processed once.
func TestNewRunsBesideOldNodes(t *testing.T) {
	old, cur := releaseBinary(t), harness.Binary(t)
	c := newCluster(t, "mixed")
	n1 := c.startNode(cur, thisRelease, "new1", 1, "--bodies-addr", "127.0.0.1:0")
	proc := c.startProcessor("pages")
	campaigns := []struct {
		id   string
		web  *synthweb.Web
		proc *pageProcessor
	}{
		{id: "plain-" + c.name, web: upgradeWeb(t, 37, 2000)},
		{id: "processed-" + c.name, web: upgradeWeb(t, 41, 2000), proc: proc},
	}
	for _, cp := range campaigns {
		var entries []string
		if cp.proc != nil {
			entries = append(entries, cp.proc.entry())
		}
		c.cli(cur, specFor(cp.web, 10000, entries...), "campaign", "start", "--spec", "-", "--id", cp.id)
	}
	o1 := c.startNode(old, PreviousRelease, "old1", 1)
	o2 := c.startNode(old, PreviousRelease, "old2", 1)
	atJoin := c.pagesBy(n1)
	harness.Eventually(t, 2*time.Minute, "the old nodes to fetch 100 pages of the runs, and the new one 100 more", func() bool {
		return c.pagesBy(o1, o2) >= 100 && c.pagesBy(n1) >= atJoin+100
	})

	began := time.Now()
	held := c.stopMidCrawl(n1)
	stopped := time.Since(began)
	for _, cp := range campaigns {
		harness.Eventually(t, time.Minute, "an old worker to take a workflow task of "+cp.id, func() bool {
			return c.oldTookNew(c.runs(cp.id)) > 0
		})
	}
	taken := time.Since(began)
	n2 := c.startNode(cur, thisRelease, "new2", 1, "--bodies-addr", "127.0.0.1:0")
	harness.Eventually(t, 2*time.Minute, "the restarted new node to fetch 100 pages", func() bool {
		return c.pagesBy(n2) >= 100
	})
	fetching := time.Since(began)
	byOld, byNew := c.pagesBy(o1, o2), c.pagesBy(n1, n2)
	maps.Copy(held, c.stopMidCrawl(o1, o2))
	oldStopped := time.Since(began)

	for _, cp := range campaigns {
		sum := c.result(cp.id, 3*time.Minute)
		again := c.checkOnce(cp.web, sum, held)
		processedAgain := 0
		if cp.proc != nil {
			processedAgain = c.checkProcessed(cp.id, cp.web, cp.proc)
		}
		runs := c.runs(cp.id)
		if by := c.releaseOf(runs[0].startedBy); by != thisRelease {
			t.Errorf("%s: the first run was started by %s, of %s; want a node of this tree", cp.id, runs[0].startedBy, by)
		}
		oldFailedNew := c.checkRuns(runs)
		t.Logf("%s: %d pages, %d workflow tasks of runs this release started taken by %s workers, %d of them failed; "+
			"%d pages fetched again, %d processed again; %s",
			cp.id, sum.Fetched, c.oldTookNew(runs), PreviousRelease, oldFailedNew, again, processedAgain, c.describeRuns(runs))
	}
	t.Logf("before the old nodes stopped, %d pages by them, %d by new ones; the stopped nodes held %d URLs; "+
		"from the new node's SIGTERM: exited %v, old workers took tasks %v, the next new node fetched 100 pages %v, "+
		"the old nodes stopped %v, campaigns completed %v",
		byOld, byNew, len(held), stopped.Round(time.Millisecond), taken.Round(time.Millisecond), fetching.Round(time.Millisecond),
		oldStopped.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
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
