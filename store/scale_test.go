package store_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/store"
	"github.com/spiderpool/spiderpool/tests/harness"
)

// TestLeaseCostDoesNotGrowWithTheFrontier: what a lease with work to do,
// and an idle poll with none, read stays the same when the frontier grows
// around that work: URLs fetched, hosts with nothing left, a paused host's
// backlog, URLs in flight on live nodes. Rows read are counted from the
// plans of the store's own statements.
func TestLeaseCostDoesNotGrowWithTheFrontier(t *testing.T) {
	url := harness.NewDatabase(t)
	var plans planRecorder
	explained, err := store.OpenExplained(ctx, url, plans.add)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(explained.Close)
	s, err := store.Open(ctx, url, 4, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	f := newScaleFrontier(t, s)

	measure := func() (lease, poll int64) {
		t.Helper()
		plans.reset()
		l, err := explained.LeaseHosts(ctx, f.busy)
		if err != nil {
			t.Fatal(err)
		}
		lease = plans.rowsRead(t)
		// The work: every pending URL of the 40 due hosts.
		if l.Size() != 200 || len(perHost(l)) != 40 {
			t.Fatalf("lease took %d URLs of %d hosts, want 200 of 40", l.Size(), len(perHost(l)))
		}
		f.unlease(l.LeaseID)
		plans.reset()
		idle, err := explained.LeaseHosts(ctx, f.tail)
		if err != nil {
			t.Fatal(err)
		}
		poll = plans.rowsRead(t)
		// Due next: the unclaimed lease, in 5 minutes (retries in 10, the
		// pause in an hour).
		const leased = 510
		if idle.Size() != 0 || idle.Pending == 0 || idle.LeasedElsewhere != leased ||
			idle.NextDue.D() < 4*time.Minute || idle.NextDue.D() > 5*time.Minute {
			t.Fatalf("idle poll %+v, want nothing, pending left, %d leased, next due in 5 minutes", idle, leased)
		}
		return lease, poll
	}

	f.grow(1)
	lease1, poll1 := measure()
	f.grow(3)
	lease4, poll4 := measure()
	t.Logf("rows read: lease %d, then %d; idle poll %d, then %d", lease1, lease4, poll1, poll4)
	if lease4 > lease1+lease1/10+20 {
		t.Errorf("a lease read %d rows, then %d on a frontier four times as large around the same work", lease1, lease4)
	}
	if poll4 > poll1+poll1/10+20 {
		t.Errorf("an idle poll read %d rows, then %d on a frontier four times as large around the same work", poll1, poll4)
	}
}

// scaleFrontier is two campaigns: busy, with 40 hosts of 5 due URLs each,
// and tail, with nothing due (a paused host, retries in 10 minutes, an
// unclaimed lease expiring in 5, 500 URLs on a live node). grow adds what
// the lease must not read.
type scaleFrontier struct {
	t          *testing.T
	s          *store.Store
	busy, tail store.HostLeaseParams
	holder     string
	units      int
}

func newScaleFrontier(t *testing.T, s *store.Store) *scaleFrontier {
	f := &scaleFrontier{t: t, s: s, holder: holder(t, s, "node-a", "1")}
	p := store.HostLeaseParams{Nodes: []campaign.LeaseNode{{ID: "a", Weight: 1, Batches: 4}}, BatchSize: 100,
		Horizon: 4 * time.Second, TTL: time.Minute, Concurrency: 2}
	f.busy, f.tail = p, p
	spec, err := campaign.Spec{Seeds: []string{"http://due1.test/"}}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*store.HostLeaseParams{&f.busy, &f.tail} {
		if c.CampaignKey, _, err = s.CreateCampaign(ctx, fmt.Sprintf("%s-%p", t.Name(), c), spec); err != nil {
			t.Fatal(err)
		}
	}
	f.exec(`CREATE SEQUENCE scale_test_urls`)
	f.exec(`INSERT INTO hosts (campaign, shard_key)
		SELECT $1, 'due' || g || '.test' FROM generate_series(1, 40) g`, f.busy.CampaignKey)
	f.rows(f.busy.CampaignKey, `SELECT 'due' || (g % 40 + 1) || '.test', 'pending', NULL, now() - interval '1 minute', NULL, NULL
		FROM generate_series(1, 200) g`)
	f.exec(`INSERT INTO hosts (campaign, shard_key) VALUES ($1, 'paused.test')`, f.tail.CampaignKey)
	if err := s.PauseHost(ctx, "paused.test", time.Hour); err != nil {
		t.Fatal(err)
	}
	f.exec(`INSERT INTO hosts (campaign, shard_key)
		SELECT $1, 'retry' || g || '.test' FROM generate_series(1, 5) g`, f.tail.CampaignKey)
	f.rows(f.tail.CampaignKey, `SELECT 'retry' || (g % 5 + 1) || '.test', 'pending', now() - interval '1 minute',
		now() + interval '10 minutes', NULL, NULL FROM generate_series(1, 10) g`)
	f.rows(f.tail.CampaignKey, `SELECT 'retry1.test', 'leased', now(), now(), NULL, now() + interval '5 minutes'
		FROM generate_series(1, 10) g`)
	f.held(f.tail.CampaignKey, "held.test")
	return f
}

// grow adds, n times: to each campaign 200 hosts whose 10 URLs are all
// fetched; to busy 500 URLs held by a live node, on a host with nothing
// pending; to tail's paused host 12,000 URLs waiting. (What tail holds in
// flight stays: an idle poll counts it, up to a cap.)
func (f *scaleFrontier) grow(n int) {
	for range n {
		f.units++
		for _, key := range []int64{f.busy.CampaignKey, f.tail.CampaignKey} {
			f.exec(fmt.Sprintf(`INSERT INTO hosts (campaign, shard_key)
				SELECT $1, 'done%d-' || g || '.test' FROM generate_series(1, 200) g`, f.units), key)
			f.rows(key, fmt.Sprintf(`SELECT 'done%d-' || (g %% 200 + 1) || '.test', 'fetched', now(), now(), NULL, NULL
				FROM generate_series(1, 2000) g`, f.units))
		}
		f.held(f.busy.CampaignKey, fmt.Sprintf("held%d.test", f.units))
		f.rows(f.tail.CampaignKey, `SELECT 'paused.test', 'pending', NULL, now() - interval '1 minute', NULL, NULL
			FROM generate_series(1, 12000) g`)
	}
	f.exec(`ANALYZE frontier, hosts, host_state`)
}

// held adds a host of 500 URLs held by a live node.
func (f *scaleFrontier) held(key int64, host string) {
	f.exec(`INSERT INTO hosts (campaign, shard_key) VALUES ($1, $2)`, key, host)
	f.rows(key, fmt.Sprintf(`SELECT '%s', 'leased', now(), now(), '%s', now() + interval '5 minutes'
		FROM generate_series(1, 500) g`, host, f.holder))
}

// rows inserts the URLs that sel lists as (shard key, state,
// first_leased_at, next_attempt_at, lease_holder, lease_expires_at).
func (f *scaleFrontier) rows(key int64, sel string) {
	f.exec(`
		INSERT INTO frontier (campaign, fingerprint, url, host_id, shard_key, depth, state, first_leased_at,
			next_attempt_at, leased_at, lease_id, lease_holder, lease_expires_at)
		SELECT $1, r.n, 'http://' || r.k || '/' || r.n, r.host, r.k, 1, r.st::url_state, r.first::timestamptz,
		       r.next::timestamptz, CASE WHEN r.st = 'leased' THEN now() END, CASE WHEN r.st = 'leased' THEN -1 END,
		       r.holder::text, r.expires::timestamptz
		FROM (
			SELECT r.*, h.id AS host, nextval('scale_test_urls') AS n
			FROM (`+sel+`) AS r(k, st, first, next, holder, expires)
			JOIN hosts h ON h.campaign = $1 AND h.shard_key = r.k
		) r`, key)
}

func (f *scaleFrontier) exec(sql string, args ...any) {
	f.t.Helper()
	if _, err := f.s.Pool().Exec(ctx, sql, args...); err != nil {
		f.t.Fatalf("%v\n%s", err, sql)
	}
}

// unlease puts the busy campaign's leased URLs back as they were.
func (f *scaleFrontier) unlease(leaseID int64) {
	f.exec(`UPDATE frontier SET state = 'pending', lease_id = NULL, lease_expires_at = NULL, leased_at = NULL,
		first_leased_at = NULL WHERE campaign = $1 AND lease_id = $2`, f.busy.CampaignKey, leaseID)
}

// planRecorder sums what the plans auto_explain sends read.
type planRecorder struct {
	mu    sync.Mutex
	plans []string
}

func (r *planRecorder) add(plan string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.plans = append(r.plans, plan)
}

func (r *planRecorder) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.plans = nil
}

// planNode is the part of an EXPLAIN (FORMAT JSON) node that says what a
// scan read. Rows are per loop.
type planNode struct {
	NodeType       string     `json:"Node Type"`
	Rows           float64    `json:"Actual Rows"`
	Loops          float64    `json:"Actual Loops"`
	RemovedFilter  float64    `json:"Rows Removed by Filter"`
	RemovedRecheck float64    `json:"Rows Removed by Index Recheck"`
	Plans          []planNode `json:"Plans"`
}

// rowsRead is the rows (or index entries) the recorded statements' scans
// returned or filtered out.
func (r *planRecorder) rowsRead(t *testing.T) int64 {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var n float64
	var walk func(planNode)
	walk = func(p planNode) {
		switch p.NodeType {
		case "Seq Scan", "Index Scan", "Index Only Scan", "Bitmap Index Scan", "Bitmap Heap Scan", "Tid Scan":
			n += (p.Rows + p.RemovedFilter + p.RemovedRecheck) * p.Loops
		}
		for _, c := range p.Plans {
			walk(c)
		}
	}
	for _, text := range r.plans {
		var doc struct {
			Query string   `json:"Query Text"`
			Plan  planNode `json:"Plan"`
		}
		if err := json.Unmarshal([]byte(text), &doc); err != nil {
			t.Fatalf("auto_explain sent a plan that is not JSON: %v\n%s", err, text)
		}
		before := n
		walk(doc.Plan)
		if testing.Verbose() {
			t.Logf("%6.0f rows: %.90s", n-before, strings.Join(strings.Fields(doc.Query), " "))
		}
	}
	return int64(n)
}

// TestLeaseHostsTakesHostsInTurn: when a node has room for fewer hosts
// than are due, each lease resumes the walk where the last one's work
// stopped, and wraps: every host is served once before any twice.
func TestLeaseHostsTakesHostsInTurn(t *testing.T) {
	s := harness.OpenStore(t)
	key := politeCampaign(t, s, t.Name(), 0, 1, 6, 3)
	p := store.HostLeaseParams{CampaignKey: key, Nodes: []campaign.LeaseNode{{ID: "a", Weight: 1, Batches: 1}},
		BatchSize: 2, Horizon: 4 * time.Second}
	served := map[string]int{}
	var order []string
	for range 3 {
		l := leaseHosts(t, s, p)
		for h, n := range perHost(l) {
			served[h] += n
			order = append(order, h)
		}
	}
	if len(served) != 6 {
		t.Fatalf("three leases of two hosts served %v (in this order: %v), want each of the 6 hosts once", served, order)
	}
	for h, n := range served {
		if n != 1 {
			t.Errorf("host %s got %d URLs in three leases, want 1", h, n)
		}
	}
	again := perHost(leaseHosts(t, s, p))
	first := map[string]bool{order[0]: true, order[1]: true}
	for h := range again {
		if !first[h] {
			t.Errorf("the fourth lease served %v; after a round it starts again with the first lease's hosts %v", again, order[:2])
		}
	}
}
