package store_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/crawl"
	"github.com/spiderpool/spiderpool/store"
	"github.com/spiderpool/spiderpool/tests/harness"
)

func TestMain(m *testing.M) { harness.Main(m) }

var ctx = context.Background()

func newCampaign(t *testing.T, s *store.Store, seeds ...string) int64 {
	t.Helper()
	spec, err := campaign.Spec{Seeds: seeds}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	key, existed, err := s.CreateCampaign(ctx, t.Name(), spec)
	if err != nil || existed {
		t.Fatalf("create campaign: key %d existed %v err %v", key, existed, err)
	}
	return key
}

func urls(t *testing.T, raw ...string) []store.NewURL {
	t.Helper()
	var out []store.NewURL
	for _, r := range raw {
		u, err := crawl.Canonicalize(r)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, store.NewURL{Fingerprint: u.Fingerprint(), URL: u.String, FoundAs: r, ShardKey: u.Host})
	}
	return out
}

// leaseParams lease up to limit due URLs, in one batch for one node: a
// long horizon and no delay give every host a quota of limit, so a lease
// takes what is due, limit at most, until a host has over half of that
// in flight.
func leaseParams(key int64, limit int) store.HostLeaseParams {
	return store.HostLeaseParams{
		CampaignKey: key,
		Nodes:       []campaign.LeaseNode{{ID: "n", Weight: 1, Batches: 1}},
		BatchSize:   limit,
		Horizon:     time.Hour,
		TTL:         time.Minute,
	}
}

// leaseAll leases with leaseParams(key, limit).
func leaseAll(t *testing.T, s *store.Store, key int64, limit int) campaign.HostLease {
	t.Helper()
	l, err := s.LeaseHosts(ctx, leaseParams(key, limit))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// ids lists a lease's URL IDs in order.
func ids(l campaign.HostLease) []int64 {
	var out []int64
	for _, b := range l.Batches {
		out = append(out, b.IDs()...)
	}
	slices.Sort(out)
	return out
}

// settle claims the leased URLs ids for holder and commits them failed
// (404): settled, they no longer count against their host's quota.
func settle(t *testing.T, s *store.Store, key, leaseID int64, ids []int64, holder string) {
	t.Helper()
	claimed, err := s.Claim(ctx, key, leaseID, ids, holder, "n", time.Minute)
	if err != nil || len(claimed) != len(ids) {
		t.Fatalf("claimed %d of %d (%v)", len(claimed), len(ids), err)
	}
	outcomes := make([]store.Outcome, len(claimed))
	for i, c := range claimed {
		outcomes[i] = store.Outcome{ID: c.ID, State: store.Failed, Attempted: true, Status: 404}
	}
	if res, err := s.Commit(ctx, key, holder, "n", outcomes, nil); err != nil || len(res.Accepted) != len(ids) {
		t.Fatalf("commit accepted %d of %d (%v)", len(res.Accepted), len(ids), err)
	}
}

func TestMigrateIsIdempotent(t *testing.T) {
	s := harness.OpenStore(t)
	n, err := s.Migrate(ctx, nil)
	if err != nil || n != 0 {
		t.Fatalf("second migrate applied %d (%v), want 0", n, err)
	}
}

// TestJITIsOffUnlessTheURLSaysSo: the store's connections run without JIT
// (see store.Open), and a database URL's ?jit= is kept.
func TestJITIsOffUnlessTheURLSaysSo(t *testing.T) {
	url := harness.NewDatabase(t)
	for _, c := range []struct{ url, want string }{{url, "off"}, {harness.WithParam(url, "jit", "on"), "on"}} {
		s, err := store.Open(ctx, c.url, 2, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var jit string
		err = s.Pool().QueryRow(ctx, `SHOW jit`).Scan(&jit)
		s.Close()
		if err != nil || jit != c.want {
			t.Errorf("%s: jit = %q, %v; want %q", c.url, jit, err, c.want)
		}
	}
}

func TestInsertDedupsByCanonicalForm(t *testing.T) {
	s := harness.OpenStore(t)
	key := newCampaign(t, s, "http://a.test/")
	n, err := s.InsertURLs(ctx, key, urls(t, "http://a.test/x", "HTTP://A.TEST:80/x#frag", "http://a.test/y", "http://b.test/"))
	if err != nil || n != 3 {
		t.Fatalf("inserted %d (%v), want 3", n, err)
	}
	n, err = s.InsertURLs(ctx, key, urls(t, "http://a.test/y", "http://a.test/z"))
	if err != nil || n != 1 {
		t.Fatalf("second insert added %d (%v), want 1", n, err)
	}
}

// TestLeaseHostsIsFairAcrossHostsAndNeverTwice: a node's room is shared
// evenly among the due hosts lease after lease, every URL is leased in
// the end, and none twice: not while the lease before holds it, nor once
// it is settled.
func TestLeaseHostsIsFairAcrossHostsAndNeverTwice(t *testing.T) {
	s := harness.OpenStore(t)
	key := politeCampaign(t, s, t.Name(), 0, 1, 4, 10)
	n := holder(t, s, "n", "1")
	p := leaseParams(key, 12) // room for 12: 3 from each of 4 hosts
	seen := map[int64]bool{}
	var held campaign.HostLease
	for range 10 {
		l := leaseHosts(t, s, p)
		if l.Size() == 0 {
			if len(seen) != 40 || l.Pending != 0 || l.LeasedElsewhere != int64(held.Size()) {
				t.Fatalf("empty lease %+v after %d distinct URLs, want all 40 leased and the last lease's %d held", l, len(seen), held.Size())
			}
			return
		}
		got := perHost(l)
		if len(got) != 4 || got["h0.test"] != got["h1.test"] || got["h0.test"] != got["h2.test"] || got["h0.test"] != got["h3.test"] {
			t.Fatalf("lease took %v, want the same from each of 4 hosts", got)
		}
		for _, id := range ids(l) {
			if seen[id] {
				t.Fatalf("URL %d leased twice", id)
			}
			seen[id] = true
		}
		// Taken while the lease before is held; only then is that one settled.
		if held.Size() > 0 {
			settle(t, s, key, held.LeaseID, ids(held), n)
		}
		held = l
	}
	t.Fatalf("40 URLs not leased in 10 leases of 12: %d", len(seen))
}

// holder registers a node process and returns its holder token: alive
// while the node's row is (see HeartbeatNode).
func holder(t *testing.T, s *store.Store, node, incarnation string) string {
	t.Helper()
	reg := store.Registration{ID: node, Weight: 1, Incarnation: incarnation, TTL: time.Hour}
	if err := s.RegisterNode(ctx, reg); err != nil {
		t.Fatal(err)
	}
	return store.HolderToken(node, incarnation)
}

func TestClaimCommitAndLostClaim(t *testing.T) {
	s := harness.OpenStore(t)
	key := newCampaign(t, s, "http://a.test/")
	n1, n2 := holder(t, s, "n1", "1"), holder(t, s, "n2", "1")
	if _, err := s.InsertURLs(ctx, key, urls(t, "http://a.test/1", "http://a.test/2", "http://a.test/3")); err != nil {
		t.Fatal(err)
	}
	l := leaseAll(t, s, key, 10)
	all := ids(l)
	claimed, err := s.Claim(ctx, key, l.LeaseID, all, n1, "n1", time.Minute)
	if err != nil || len(claimed) != 3 {
		t.Fatalf("claimed %d (%v)", len(claimed), err)
	}
	// While the first holder is alive, a rerouted batch gets nothing.
	if c, err := s.Claim(ctx, key, l.LeaseID, all[1:], n2, "n2", time.Minute); err != nil || len(c) != 0 {
		t.Fatalf("claimed %d from a live holder (%v)", len(c), err)
	}
	// Nor does a release of its lease's unclaimed URLs: what a node
	// claimed stays its own.
	if n, err := s.ReleaseUnclaimed(ctx, key, []int64{l.LeaseID}); err != nil || n != 0 {
		t.Fatalf("released %d URLs a live holder holds (%v)", n, err)
	}
	// Once it stops renewing, the rerouted batch takes the claim over; the
	// first holder's commit is then refused, so it cannot overwrite the new
	// holder's results.
	if err := s.DeregisterNode(ctx, "n1", "1"); err != nil {
		t.Fatal(err)
	}
	if c, err := s.Claim(ctx, key, l.LeaseID, all[1:], n2, "n2", time.Minute); err != nil || len(c) != 2 {
		t.Fatalf("claimed %d from a dead holder (%v), want 2", len(c), err)
	}
	page := &store.Page{Status: 200, ContentType: "text/html", ContentLength: 10, FetchedAt: time.Now(), Duration: time.Millisecond}
	res, err := s.Commit(ctx, key, n1, "n1", []store.Outcome{
		{ID: all[0], State: store.Fetched, Attempted: true, Status: 200, Page: page},
		{ID: all[1], State: store.Fetched, Attempted: true, Status: 200, Page: page},
	}, urls(t, "http://a.test/new"))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Accepted[all[0]] || res.Accepted[all[1]] || res.Discovered != 1 {
		t.Fatalf("commit accepted %v discovered %d; want only %d and 1 new link", res.Accepted, res.Discovered, all[0])
	}
	res, err = s.Commit(ctx, key, n2, "n2", []store.Outcome{
		{ID: all[1], State: store.Fetched, Attempted: true, Status: 200, Page: page},
		{ID: all[2], State: store.Pending, Attempted: true, Status: 503, Error: "HTTP 503", RetryIn: time.Hour},
	}, nil)
	if err != nil || len(res.Accepted) != 2 {
		t.Fatalf("second holder's commit accepted %v (%v)", res.Accepted, err)
	}
	// A later claim of the same IDs finds them settled: nothing to refetch.
	again, err := s.Claim(ctx, key, l.LeaseID, all, holder(t, s, "n1", "2"), "n1", time.Minute)
	if err != nil || len(again) != 0 {
		t.Fatalf("re-claim got %d URLs (%v), want 0", len(again), err)
	}
	sum, err := s.Summarize(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Fetched != 2 || sum.Pages != 2 || sum.Pending != 2 || sum.PerNode["n1"] != 1 || sum.PerNode["n2"] != 1 {
		t.Fatalf("summary %+v", sum)
	}
	// The retried URL is not due for an hour: the lease says so.
	l2 := leaseAll(t, s, key, 10)
	if l2.Size() != 1 { // only the new link
		t.Fatalf("lease took %d, want only the new link", l2.Size())
	}
	if _, err := s.ReleaseUnclaimed(ctx, key, []int64{l2.LeaseID}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, `UPDATE frontier SET state = 'excluded' WHERE id = $1`, ids(l2)[0]); err != nil {
		t.Fatal(err)
	}
	l3 := leaseAll(t, s, key, 10)
	if l3.Size() != 0 || l3.Pending != 1 || l3.LeasedElsewhere != 0 || l3.NextDue.D() < 50*time.Minute {
		t.Fatalf("lease = %+v, want one pending URL due in about an hour", l3)
	}
}

func TestExpiredLeaseReturnsToPending(t *testing.T) {
	s := harness.OpenStore(t)
	key := newCampaign(t, s, "http://a.test/")
	if _, err := s.InsertURLs(ctx, key, urls(t, "http://a.test/1")); err != nil {
		t.Fatal(err)
	}
	p := leaseParams(key, 10)
	p.TTL = time.Millisecond
	l, err := s.LeaseHosts(ctx, p)
	if err != nil || l.Size() != 1 {
		t.Fatalf("lease %+v %v", l, err)
	}
	if _, err := s.Pool().Exec(ctx, `UPDATE frontier SET lease_expires_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	l2 := leaseAll(t, s, key, 10)
	if l2.Size() != 1 || l2.LeaseID == l.LeaseID {
		t.Fatalf("expired URL not re-leased: %+v", l2)
	}
	// The first lease's batch can no longer claim it.
	if c, err := s.Claim(ctx, key, l.LeaseID, ids(l), holder(t, s, "n", "1"), "n", time.Minute); err != nil || len(c) != 0 {
		t.Fatalf("stale lease claimed %d (%v)", len(c), err)
	}
}

// TestMaxPagesBudget: leases admit no more URLs never leased before than
// limits.max_pages, say when the budget is spent, and do not charge a URL
// again when it comes back to pending.
func TestMaxPagesBudget(t *testing.T) {
	s := harness.OpenStore(t)
	key := newCampaign(t, s, "http://a.test/")
	var raw []string
	for i := range 10 {
		raw = append(raw, fmt.Sprintf("http://a.test/%d", i))
	}
	if _, err := s.InsertURLs(ctx, key, urls(t, raw...)); err != nil {
		t.Fatal(err)
	}
	n := holder(t, s, "n", "1")
	p := leaseParams(key, 4)
	p.MaxPages = 6
	l1 := leaseHosts(t, s, p)
	settle(t, s, key, l1.LeaseID, ids(l1), n) // the host may take more
	l2 := leaseHosts(t, s, p)
	l3 := leaseHosts(t, s, p)
	if l1.Size() != 4 || l2.Size() != 2 || !l2.BudgetExhausted || l3.Size() != 0 || !l3.BudgetExhausted {
		t.Fatalf("leases of %d, %d (exhausted %v), %d (exhausted %v); want 4, 2 and 0, both exhausted",
			l1.Size(), l2.Size(), l2.BudgetExhausted, l3.Size(), l3.BudgetExhausted)
	}
	// A URL that goes back to pending for a retry is not charged again.
	if _, err := s.ReleaseUnclaimed(ctx, key, []int64{l2.LeaseID}); err != nil {
		t.Fatal(err)
	}
	if l4 := leaseHosts(t, s, p); l4.Size() != 2 {
		t.Fatalf("released URLs re-leased %d, want 2", l4.Size())
	}
	excluded, err := s.ExcludePending(ctx, key, "limits.max_pages reached")
	if err != nil || excluded != 4 {
		t.Fatalf("excluded %d (%v), want the 4 never admitted", excluded, err)
	}
}

// TestConcurrentCommitsSameLinks has many batches discover the same links at
// once: each link is inserted once, and no transaction deadlocks.
func TestConcurrentCommitsSameLinks(t *testing.T) {
	s := harness.OpenStore(t)
	key := newCampaign(t, s, "http://a.test/")
	var raw []string
	for i := range 300 {
		raw = append(raw, fmt.Sprintf("http://h%d.test/p%d", i%7, i))
	}
	links := urls(t, raw...)
	var wg sync.WaitGroup
	// The commits run under a deadline, so wg.Wait ends even if one hangs.
	commitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	total := make([]int, 8)
	errs := make([]error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := slices.Clone(links)
			// Each worker submits the links in a different order.
			for i := range mine {
				j := (i*(w+3) + w) % len(mine)
				mine[i], mine[j] = mine[j], mine[i]
			}
			res, err := s.Commit(commitCtx, key, fmt.Sprintf("w%d", w), "n", nil, mine)
			total[w], errs[w] = res.Discovered, err
		}()
	}
	wg.Wait()
	sum := 0
	for w := range 8 {
		if errs[w] != nil {
			t.Fatalf("worker %d: %v", w, errs[w])
		}
		sum += total[w]
	}
	if sum != 300 {
		t.Fatalf("links inserted %d times in all, want exactly 300", sum)
	}
}

func TestNodeRegistry(t *testing.T) {
	s := harness.OpenStore(t)
	reg := store.Registration{ID: "n1", Weight: 2, Incarnation: "a", TTL: time.Hour}
	if err := s.RegisterNode(ctx, reg); err != nil {
		t.Fatal(err)
	}
	if err := s.RegisterNode(ctx, store.Registration{ID: "n2", Weight: 1, Incarnation: "b", TTL: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, `UPDATE nodes SET heartbeat_at = now() - interval '1 minute' WHERE id = 'n2'`); err != nil {
		t.Fatal(err)
	}
	nodes, err := s.Nodes(ctx, nil)
	if err != nil || len(nodes) != 2 || !nodes[0].Alive || nodes[1].Alive || nodes[0].Weight != 2 {
		t.Fatalf("nodes = %+v (%v); want n1 alive with weight 2, n2 dead", nodes, err)
	}
	if err := s.HeartbeatNode(ctx, "n1", "someone-else", true); err == nil {
		t.Fatal("heartbeat with a stale incarnation succeeded")
	}
	if err := s.DeregisterNode(ctx, "n1", "a"); err != nil {
		t.Fatal(err)
	}
	if nodes, _ := s.Nodes(ctx, []string{"n1"}); len(nodes) != 1 || nodes[0].Alive {
		t.Fatalf("deregistered node = %+v, want not alive", nodes)
	}
}

// TestURLWhoseClaimIsLostEndsFailed is issue 11, defect 7: a page that
// crashes (or OOMs) every node that fetches it never reaches a commit, so
// attempts charged only at commit let it be leased forever. A claim is an
// attempt: a URL claimed retry.max_attempts times with no outcome ends
// failed, with the reason, and is handed to no node again.
func TestURLWhoseClaimIsLostEndsFailed(t *testing.T) {
	s := harness.OpenStore(t)
	// Two attempts, not the default three: the claim reads the campaign's.
	spec, err := campaign.Spec{Seeds: []string{"http://a.test/"}, Retry: campaign.Retry{MaxAttempts: 2}}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	key, _, err := s.CreateCampaign(ctx, t.Name(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.InsertURLs(ctx, key, urls(t, "http://a.test/crash", "http://a.test/fine")); err != nil {
		t.Fatal(err)
	}
	var crash int64
	for life := 1; ; life++ {
		l := leaseAll(t, s, key, 10)
		if life == 1 {
			crash = ids(l)[0]
		}
		if !slices.Contains(ids(l), crash) {
			t.Fatalf("life %d: the crashing URL was not leased again (%v)", life, ids(l))
		}
		node := holder(t, s, "n", fmt.Sprint(life))
		claimed, err := s.Claim(ctx, key, l.LeaseID, ids(l), node, "n", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(claimed, func(c store.ClaimedURL) bool { return c.ID == crash })
		if i < 0 {
			t.Fatalf("life %d: the crashing URL was not claimed", life)
		}
		if life == 3 {
			if got := claimed[i].Failed; got != "node lost while fetching (after 2 attempts)" {
				t.Fatalf("third claim of a URL two nodes died fetching: failed %q, want the reason", got)
			}
			break
		}
		if claimed[i].Failed != "" || claimed[i].Attempts != life-1 {
			t.Fatalf("life %d: claimed %+v, want it to fetch, after %d attempts", life, claimed[i], life-1)
		}
		// The other URL is settled; the crashing one kills the node.
		var others []store.Outcome
		for _, c := range claimed {
			if c.ID != crash {
				others = append(others, store.Outcome{ID: c.ID, State: store.Failed, Attempted: true, Status: 404})
			}
		}
		if _, err := s.Commit(ctx, key, node, "n", others, nil); err != nil {
			t.Fatal(err)
		}
		if err := s.DeregisterNode(ctx, "n", fmt.Sprint(life)); err != nil { // as its TTL passing would
			t.Fatal(err)
		}
	}
	var state, reason string
	var attempts int
	if err := s.Pool().QueryRow(ctx, `SELECT state::text, coalesce(last_error, ''), attempts FROM frontier WHERE id = $1`, crash).
		Scan(&state, &reason, &attempts); err != nil {
		t.Fatal(err)
	}
	if state != store.Failed || reason != "node lost while fetching (after 2 attempts)" || attempts != 2 {
		t.Fatalf("crashing URL ended %s (%q) after %d attempts, want failed with the reason after 2", state, reason, attempts)
	}
	if l := leaseAll(t, s, key, 10); l.Size() != 0 || l.Pending != 0 || l.LeasedElsewhere != 0 {
		t.Fatalf("lease after the URL failed: %+v, want nothing left", l)
	}
}

// TestClaimChargesOnlyWhatItTakes: the attempt a claim charges is given
// back when the URL is handed back unfetched or settles without a request
// (robots.txt), and is the attempt itself when the request is made; a
// second claim by the same holder charges nothing.
func TestClaimChargesOnlyWhatItTakes(t *testing.T) {
	s := harness.OpenStore(t)
	key := newCampaign(t, s, "http://a.test/")
	if _, err := s.InsertURLs(ctx, key, urls(t, "http://a.test/fetched", "http://a.test/back", "http://a.test/excluded")); err != nil {
		t.Fatal(err)
	}
	l := leaseAll(t, s, key, 10)
	all := ids(l)
	n := holder(t, s, "n", "1")
	for range 2 { // delivered twice
		if c, err := s.Claim(ctx, key, l.LeaseID, all, n, "n", time.Minute); err != nil || len(c) != 3 {
			t.Fatalf("claim: %d (%v)", len(c), err)
		}
	}
	attempts := func(id int64) int {
		t.Helper()
		var a int
		if err := s.Pool().QueryRow(ctx, `SELECT attempts FROM frontier WHERE id = $1`, id).Scan(&a); err != nil {
			t.Fatal(err)
		}
		return a
	}
	for _, id := range all {
		if a := attempts(id); a != 1 {
			t.Fatalf("URL %d claimed twice by one holder has %d attempts, want 1", id, a)
		}
	}
	page := &store.Page{Status: 200, FetchedAt: time.Now(), Duration: time.Millisecond}
	if _, err := s.Commit(ctx, key, n, "n", []store.Outcome{
		{ID: all[0], State: store.Fetched, Attempted: true, Status: 200, Page: page},
		{ID: all[2], State: store.Excluded, Error: "robots.txt disallows it"},
	}, nil); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Release(ctx, key, l.LeaseID, all[1:2], n); err != nil || r != 1 {
		t.Fatalf("hand back: %d (%v)", r, err)
	}
	if got := []int{attempts(all[0]), attempts(all[1]), attempts(all[2])}; !slices.Equal(got, []int{1, 0, 0}) {
		t.Fatalf("attempts fetched, handed back, excluded = %v, want [1 0 0]", got)
	}
}

// TestInvalidDatabaseURLHidesItsPassword: a URL that does not parse is
// named in the error, its password masked, in URL and key=value forms.
func TestInvalidDatabaseURLHidesItsPassword(t *testing.T) {
	for _, url := range []string{
		"postgres://u:hunter2@h:notaport/db",
		"host=h password=hunter2 port=x",
		"postgres://u@h:notaport/db?password=hunter2",
	} {
		_, err := store.Open(ctx, url, 1, time.Second)
		if err == nil || !strings.Contains(err.Error(), "is not valid") || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("Open(%q): %v, want it not valid, without the password", url, err)
		}
	}
}
