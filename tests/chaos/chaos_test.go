// Package chaos kills and restarts real processes under a running crawl:
// node workers (SIGKILL and SIGTERM), the Temporal dev server (same db
// file) and Postgres, and checks that nothing is lost and, where the
// design promises it, nothing is fetched twice. It runs in its own test
// binary so its restarts disturb no other test.
package chaos

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/ring"
	"github.com/spiderpool/spiderpool/tests/harness"
	"github.com/spiderpool/spiderpool/tests/synthweb"
)

func TestMain(m *testing.M) { harness.Main(m) }

var bg = context.Background()

func web(t *testing.T, pages int) *synthweb.Web {
	t.Helper()
	return harness.StartWeb(t, synthweb.Config{
		Hosts: 24, Pages: pages, LinksPerPage: 6, CrossHostFraction: 0.3, Seed: 17, Latency: 2 * time.Millisecond,
	})
}

func spec(w *synthweb.Web) campaign.Spec {
	return campaign.Spec{
		Seeds:      []string{w.Seed()},
		Scope:      campaign.Scope{AllowedDomains: []string{"127.0.0.1"}},
		Politeness: campaign.Politeness{MaxConcurrencyPerHost: 2},
		Dispatch:   campaign.Dispatch{BatchSize: 50},
	}
}

func waitFetched(t *testing.T, s *harness.Stack, id string, n int64) {
	t.Helper()
	harness.Eventually(t, 3*time.Minute, "the campaign to fetch enough pages", func() bool {
		var got int64
		err := s.Store.Pool().QueryRow(bg, `SELECT count(*) FROM pages`).Scan(&got)
		return err == nil && got >= n
	})
}

// tally compares the access log with the web: pages never fetched, and
// pages fetched more than once (with their hosts).
func tally(w *synthweb.Web) (missing []string, twice map[string]int) {
	hits := w.Hits()
	twice = map[string]int{}
	for _, p := range w.Pages() {
		switch n := hits[p]; {
		case n == 0:
			missing = append(missing, p)
		case n > w.ExpectedHits(p):
			twice[p] = n
		}
	}
	return missing, twice
}

// fetchingNode is the first of nodes that has fetched pages, with the
// hosts it fetched: the hash may give a node none of a web's hosts (b, a
// third of the weight, gets none of 24 in about one run in a thousand),
// and a test of what happens to a node's hosts needs one that has some.
func fetchingNode(t *testing.T, s *harness.Stack, nodes ...*harness.NodeProcess) (*harness.NodeProcess, []string) {
	t.Helper()
	for _, n := range nodes {
		if hosts := s.Strings(`SELECT DISTINCT f.shard_key FROM pages p JOIN frontier f ON f.id = p.url_id WHERE p.node = $1`,
			n.ID); len(hosts) > 0 {
			return n, hosts
		}
	}
	t.Fatal("no node has fetched a page")
	return nil, nil
}

func hostOf(url string) string {
	rest := strings.TrimPrefix(url, "http://")
	host, _, _ := strings.Cut(rest, "/")
	return host
}

// TestKilledNodeLosesNothing: a node process is killed with SIGKILL
// mid-crawl; the campaign completes, every page is fetched, at most the
// killed node's in-flight URLs are fetched again, and its hosts move.
func TestKilledNodeLosesNothing(t *testing.T) {
	w := web(t, 5000)
	s := harness.NewStack(t)
	a := s.StartNodeProcess("a", 1)
	b := s.StartNodeProcess("b", 1)
	c := s.StartNodeProcess("c", 2)
	id := "killed-" + s.Name
	if _, err := s.Campaigns.Start(bg, id, spec(w)); err != nil {
		t.Fatal(err)
	}
	waitFetched(t, s, id, 1500)

	victim, hosts := fetchingNode(t, s, b, a, c)
	if err := victim.Kill(); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	// What the dead node held and had not committed: the most it can have
	// had on the wire.
	var inflight int
	if err := s.Store.Pool().QueryRow(bg, `SELECT count(*) FROM frontier WHERE state = 'leased' AND lease_holder LIKE $1 || '@%'`,
		victim.ID).Scan(&inflight); err != nil {
		t.Fatal(err)
	}

	sum := harness.CampaignResult(t, s, id, 5*time.Minute)
	missing, twice := tally(w)
	if len(missing) > 0 {
		t.Fatalf("%d pages never fetched, e.g. %v", len(missing), missing[:min(3, len(missing))])
	}
	if sum.Fetched != int64(len(w.Pages())) || sum.Pending != 0 || sum.Leased != 0 {
		t.Fatalf("summary %+v", sum)
	}
	for p := range twice {
		if !slices.Contains(hosts, hostOf(p)) {
			t.Errorf("%s fetched twice, but its host was not the killed node's", p)
		}
	}
	if len(twice) > inflight {
		t.Fatalf("%d pages fetched again, more than the %d URLs the killed node held", len(twice), inflight)
	}
	statusAgreesWithPostgres(t, s, id)

	// How long the killed node's hosts waited for another node.
	var moves []time.Duration
	for _, h := range hosts {
		for _, r := range w.Log(h) {
			if r.At.After(killedAt) {
				moves = append(moves, r.At.Sub(killedAt))
				break
			}
		}
	}
	sort.Slice(moves, func(i, j int) bool { return moves[i] < moves[j] })
	if len(moves) == 0 {
		t.Fatal("none of the killed node's hosts was fetched after the kill")
	}
	t.Logf("killed %s holding %d URLs (%d hosts); %d pages fetched again; its hosts resumed elsewhere after %v (first) .. %v (last, %d hosts with work left)",
		victim.ID, inflight, len(hosts), len(twice), moves[0].Round(time.Millisecond), moves[len(moves)-1].Round(time.Millisecond), len(moves))
	harness.RecordHistory(t, s.Client, id, "node_killed")
}

// statusAgreesWithPostgres checks a finished campaign's status against
// Postgres: pages fetched, overall and by node.
func statusAgreesWithPostgres(t *testing.T, s *harness.Stack, id string) {
	t.Helper()
	st, err := s.Campaigns.Status(bg, id)
	if err != nil {
		t.Fatal(err)
	}
	var fetched int64
	if err := s.Store.Pool().QueryRow(bg, `SELECT count(*) FROM frontier WHERE state = 'fetched'`).Scan(&fetched); err != nil {
		t.Fatal(err)
	}
	if st.Counters.Fetched != fetched {
		t.Errorf("status says %d pages fetched, Postgres %d", st.Counters.Fetched, fetched)
	}
	perNode := map[string]int64{}
	rows, err := s.Store.Pool().Query(bg, `SELECT node, count(*) FROM pages GROUP BY node`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var node string
		var n int64
		if err := rows.Scan(&node, &n); err != nil {
			t.Fatal(err)
		}
		perNode[node] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, n := range st.Nodes {
		if n.Fetched != perNode[n.ID] {
			t.Errorf("status says node %s fetched %d pages, Postgres %d", n.ID, n.Fetched, perNode[n.ID])
		}
	}
}

// TestNewNodeTakesItsShare: a fourth node started mid-campaign gets work at
// the next membership refresh and takes the hosts the ring gives it, about
// its weight's share.
func TestNewNodeTakesItsShare(t *testing.T) {
	w := harness.StartWeb(t, synthweb.Config{
		Hosts: 60, Pages: 6000, LinksPerPage: 6, CrossHostFraction: 0.3, Seed: 17, Latency: 2 * time.Millisecond,
	})
	s := harness.NewStack(t)
	s.StartNodeProcess("a", 1)
	s.StartNodeProcess("b", 1)
	s.StartNodeProcess("c", 2)
	id := "joined-" + s.Name
	// Paced so the crawl outlasts a membership refresh or two.
	sp := spec(w)
	sp.Politeness = campaign.Politeness{MaxConcurrencyPerHost: 1, MinDelay: campaign.Duration(100 * time.Millisecond)}
	if _, err := s.Campaigns.Start(bg, id, sp); err != nil {
		t.Fatal(err)
	}
	waitFetched(t, s, id, 1000)
	d := s.StartNodeProcess("d", 1)
	registered := time.Now()
	var firstBatch time.Duration
	harness.Eventually(t, time.Minute, "the new node's first batch", func() bool {
		st, err := s.Campaigns.Status(bg, id)
		if err != nil {
			return false
		}
		for _, n := range st.Nodes {
			if n.ID == d.ID && n.BatchesSent > 0 {
				firstBatch = time.Since(registered)
				return true
			}
		}
		return false
	})
	sum := harness.CampaignResult(t, s, id, 5*time.Minute)
	if missing, twice := tally(w); len(missing) > 0 || len(twice) > 0 {
		t.Fatalf("%d pages missing, %d fetched twice", len(missing), len(twice))
	}
	// d fetched exactly the hosts the ring gives it, of those with work
	// left when it joined.
	var joinLease int64
	if err := s.Store.Pool().QueryRow(bg, `SELECT after_lease FROM node_weight_history WHERE node = $1 AND reason = 'joined'`, d.ID).Scan(&joinLease); err != nil {
		t.Fatal(err)
	}
	r := ring.New()
	for _, n := range []struct {
		id string
		w  float64
	}{{s.NodeID("a"), 1}, {s.NodeID("b"), 1}, {s.NodeID("c"), 2}, {d.ID, 1}} {
		r.Set(n.id, n.w)
	}
	owned, fetched := map[string]bool{}, map[string]bool{}
	rows, err := s.Store.Pool().Query(bg, `SELECT DISTINCT f.shard_key, p.node FROM pages p JOIN frontier f ON f.id = p.url_id WHERE f.lease_id > $1`, joinLease)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var key, node string
		if err := rows.Scan(&key, &node); err != nil {
			t.Fatal(err)
		}
		if owner, _ := r.Lookup(key); owner == d.ID {
			owned[key] = true
		}
		if node == d.ID {
			fetched[key] = true
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for key := range fetched {
		if !owned[key] {
			t.Errorf("%s fetched %s, which the ring gives another node", d.ID, key)
		}
	}
	if len(fetched) != len(owned) || len(owned) == 0 {
		t.Fatalf("%s owns %d hosts with work left and fetched %d of them", d.ID, len(owned), len(fetched))
	}
	t.Logf("node %s got its first batch %v after registering (membership refresh every 10s); it owns %d of the %d hosts (weight share 1/5 = %.0f) and fetched %d pages of them",
		d.ID, firstBatch.Round(100*time.Millisecond), len(owned), len(w.Hosts()), float64(len(w.Hosts()))/5, sum.PerNode[d.ID])
}

// TestTemporalRestartLosesAndRepeatsNoPage: the Temporal dev server is
// killed and started again on the same db file mid-crawl; the campaign
// resumes and completes with nothing lost and no page fetched twice.
func TestTemporalRestartLosesAndRepeatsNoPage(t *testing.T) {
	w := web(t, 5000)
	s := harness.NewStack(t)
	s.StartNode("a", 1)
	s.StartNode("b", 1)
	s.StartNode("c", 2)
	id := "temporal-restart-" + s.Name
	// Paced, so batches run for seconds and the outage catches them mid-way.
	sp := spec(w)
	sp.Politeness = campaign.Politeness{MaxConcurrencyPerHost: 1, MinDelay: campaign.Duration(50 * time.Millisecond)}
	if _, err := s.Campaigns.Start(bg, id, sp); err != nil {
		t.Fatal(err)
	}
	waitFetched(t, s, id, 1200)
	held := func() int {
		var n int
		if err := s.Store.Pool().QueryRow(bg, `SELECT count(*) FROM frontier WHERE state = 'leased' AND lease_holder IS NOT NULL`).Scan(&n); err != nil {
			return -1
		}
		return n
	}
	harness.Eventually(t, time.Minute, "batches running", func() bool { return held() > 0 })
	tmp := harness.Temporal(t)
	if err := tmp.Kill(); err != nil {
		t.Fatal(err)
	}
	down := time.Now()
	var before, after int64
	_ = s.Store.Pool().QueryRow(bg, `SELECT count(*) FROM pages`).Scan(&before)
	// Batches already running finish their URLs with Temporal away: wait
	// until none is left, so the outage outlasts every batch.
	harness.Eventually(t, 2*time.Minute, "the running batches to finish with Temporal down", func() bool { return held() == 0 })
	_ = s.Store.Pool().QueryRow(bg, `SELECT count(*) FROM pages`).Scan(&after)
	if err := tmp.Restart(bg); err != nil {
		t.Fatal(err)
	}
	t.Logf("Temporal down for %v; batches committed %d pages meanwhile", time.Since(down).Round(time.Millisecond), after-before)
	sum := harness.CampaignResult(t, s, id, 5*time.Minute)
	missing, twice := tally(w)
	if len(missing) > 0 || len(twice) > 0 {
		t.Fatalf("after the Temporal restart: %d pages missing, %d fetched twice (e.g. %v)", len(missing), len(twice), keys(twice))
	}
	if sum.Fetched != int64(len(w.Pages())) {
		t.Fatalf("summary %+v", sum)
	}
	t.Logf("completed: %d pages, each fetched once; %d runs", sum.Fetched, sum.Runs)
}

func keys(m map[string]int) []string {
	var out []string
	for k := range m {
		out = append(out, k)
		if len(out) == 3 {
			break
		}
	}
	return out
}

// TestPostgresOutageLosesNothingAndBoundsHistory keeps Postgres down for
// postgresOutage. By outageRamp the workflow's control calls wait their
// longest between tries (controlRetryMax in package workflows: a minute,
// after waits of 1, 2, 4, 8, 16 and 32 seconds); from then on each try
// costs at most eventsPerTry: the retry timer (started, fired), its
// workflow task, and a marker for each kind of control call (lease,
// membership, release, ring-change write).
const (
	postgresOutage = 5 * time.Minute
	outageRamp     = 65 * time.Second
	retryEvery     = time.Minute
	eventsPerTry   = 10
)

// rampEvents bounds what the outage costs until outageRamp: six tries and
// each batch in flight failing (its activity's events, its workflow task,
// a release: 8) on each node's window.
func rampEvents(nodes, window int) int64 { return 6*eventsPerTry + int64(nodes*window*8) }

// triesIn is the most tries an interval of d holds once the control calls
// wait retryEvery: one a retryEvery, and one more at its edge.
func triesIn(d time.Duration) int64 { return int64(math.Ceil(d.Seconds()/retryEvery.Seconds())) + 1 }

// TestPostgresOutageLosesNothingAndBoundsHistory: Postgres goes down
// mid-crawl for postgresOutage and comes back. Activities fail, the
// workflow holds its control calls back, and the campaign completes with
// nothing lost. The outage adds a bounded number of events to the
// campaign's history (a try a minute once the backoff has grown), and no
// page is fetched twice unless it was leased when Postgres went down.
func TestPostgresOutageLosesNothingAndBoundsHistory(t *testing.T) {
	cluster := harness.Cluster(t)
	if cluster == nil {
		t.Fatal("DATABASE_URL points at a server this test cannot stop; unset it to run the chaos tests")
	}
	w := web(t, 5000)
	s := harness.NewStack(t)
	s.StartNode("a", 1)
	s.StartNode("b", 1)
	s.StartNode("c", 2)
	id := "postgres-restart-" + s.Name
	sp := spec(w)
	if _, err := s.Campaigns.Start(bg, id, sp); err != nil {
		t.Fatal(err)
	}
	waitFetched(t, s, id, 1200)
	var leased, claimed int
	if err := s.Store.Pool().QueryRow(bg, `SELECT count(*), count(lease_holder) FROM frontier WHERE state = 'leased'`).Scan(&leased, &claimed); err != nil {
		t.Fatal(err)
	}
	atDown := historyEvents(t, s, id)
	if err := cluster.Down(); err != nil {
		t.Fatal(err)
	}
	down := time.Now()
	// The campaign answers status all along: its workflow needs no Postgres.
	outageFor := func(d time.Duration) func() bool {
		return func() bool {
			st, err := s.Campaigns.Status(bg, id)
			return err == nil && st.CampaignID == id && time.Since(down) >= d
		}
	}
	harness.Eventually(t, outageRamp+time.Minute, "the control calls' backoff to grow, the campaign answering status", outageFor(outageRamp))
	atRamp, rampEnd := historyEvents(t, s, id), time.Since(down)
	harness.Eventually(t, postgresOutage+time.Minute, "the outage to last its time, the campaign answering status", outageFor(postgresOutage))
	atUp, outage := historyEvents(t, s, id), time.Since(down)
	if err := cluster.Up(bg); err != nil {
		t.Fatal(err)
	}
	steady, steadyFor := atUp-atRamp, outage-rampEnd
	t.Logf("Postgres down for %v with %d URLs leased (%d claimed by nodes): %d history events added, %.1f a minute; %.1f a minute after the first %v",
		outage.Round(time.Second), leased, claimed, atUp-atDown, float64(atUp-atDown)/outage.Minutes(),
		float64(steady)/steadyFor.Minutes(), rampEnd.Round(time.Second))
	window := sp.Dispatch.WindowPerNode
	if window == 0 {
		window = campaign.DefaultWindowPerNode
	}
	if bound := triesIn(steadyFor) * eventsPerTry; steady > bound {
		t.Errorf("%d history events in the %v after the backoff had grown, more than %d (%d a try, a try a %v)",
			steady, steadyFor.Round(time.Second), bound, eventsPerTry, retryEvery)
	}
	if bound := rampEvents(3, window); atRamp-atDown > bound {
		t.Errorf("%d history events in the first %v of the outage, more than %d", atRamp-atDown, rampEnd.Round(time.Second), bound)
	}

	sum := harness.CampaignResult(t, s, id, 5*time.Minute)
	missing, twice := tally(w)
	if len(missing) > 0 {
		t.Fatalf("%d pages never fetched after the Postgres outage", len(missing))
	}
	if sum.Fetched != int64(len(w.Pages())) || sum.Pending != 0 || sum.Leased != 0 {
		t.Fatalf("summary %+v", sum)
	}
	if len(twice) > leased {
		t.Fatalf("%d pages fetched again, more than the %d URLs leased when Postgres went down (e.g. %v)", len(twice), leased, keys(twice))
	}
	t.Logf("completed %v after Postgres came back: %d pages; %d fetched again (of %d leased at the outage); %d runs",
		time.Since(down.Add(outage)).Round(time.Second), sum.Fetched, len(twice), leased, sum.Runs)
}

// historyEvents counts the events in the histories of all the campaign's
// runs so far.
func historyEvents(t *testing.T, s *harness.Stack, id string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	runs := map[string]bool{}
	cur, err := s.Client.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		t.Fatalf("describe %s: %v", id, err)
	}
	runs[cur.GetWorkflowExecutionInfo().GetExecution().GetRunId()] = true
	var token []byte
	for {
		resp, err := s.Client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: fmt.Sprintf("WorkflowId = '%s'", id), NextPageToken: token,
		})
		if err != nil {
			t.Fatalf("list runs of %s: %v", id, err)
		}
		for _, e := range resp.GetExecutions() {
			runs[e.GetExecution().GetRunId()] = true
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			break
		}
	}
	var n int64
	for run := range runs {
		d, err := s.Client.DescribeWorkflowExecution(ctx, id, run)
		if err != nil {
			t.Fatalf("describe run %s of %s: %v", run, id, err)
		}
		n += d.GetWorkflowExecutionInfo().GetHistoryLength()
	}
	return n
}

// TestDrainThenStop: after a drain the node's batches in flight finish, it
// gets no more, status shows it drained, and stopping it then fetches
// nothing twice.
func TestDrainThenStop(t *testing.T) {
	w := web(t, 5000)
	s := harness.NewStack(t)
	a := s.StartNodeProcess("a", 1)
	b := s.StartNodeProcess("b", 1)
	c := s.StartNodeProcess("c", 2)
	id := "drain-stop-" + s.Name
	if _, err := s.Campaigns.Start(bg, id, spec(w)); err != nil {
		t.Fatal(err)
	}
	waitFetched(t, s, id, 1200)
	drained, _ := fetchingNode(t, s, b, a, c) // a drained node with nothing to finish proves nothing
	dctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	ns, err := s.Campaigns.Drain(dctx, id, drained.ID)
	if err != nil {
		t.Fatal(err)
	}
	drainedAt := time.Now()
	harness.Eventually(t, time.Minute, "the drained node to show drained", func() bool {
		st, err := s.Campaigns.Status(bg, id)
		if err != nil {
			return false
		}
		for _, n := range st.Nodes {
			if n.ID == drained.ID {
				return n.State == campaign.NodeDrained
			}
		}
		return false
	})
	t.Logf("%s: %d batches at the drain, %s; drained after %v", drained.ID, ns.BatchesSent, ns.State, time.Since(drainedAt).Round(time.Millisecond))
	if err := drained.Stop(); err != nil {
		t.Fatal(err)
	}
	sum := harness.CampaignResult(t, s, id, 5*time.Minute)
	missing, twice := tally(w)
	if len(missing) > 0 || len(twice) > 0 {
		t.Fatalf("%d pages missing, %d fetched twice after stopping the drained node", len(missing), len(twice))
	}
	final, err := s.Campaigns.Status(bg, id)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range final.Nodes {
		if n.ID == drained.ID && n.BatchesSent != ns.BatchesSent {
			t.Fatalf("%s got %d batches after its drain", drained.ID, n.BatchesSent-ns.BatchesSent)
		}
	}
	t.Logf("completed: %d pages, none twice; %s stopped after draining", sum.Fetched, drained.ID)
	harness.RecordHistory(t, s.Client, id, "drain_then_stop")
}
