package store_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/ring"
	"github.com/spiderpool/spiderpool/store"
	"github.com/spiderpool/spiderpool/tests/harness"
)

// politeCampaign creates a campaign with the given politeness and hosts
// h0..h(n-1).test of perHost URLs each.
func politeCampaign(t *testing.T, s *store.Store, name string, delay time.Duration, conc, hosts, perHost int) int64 {
	t.Helper()
	spec, err := campaign.Spec{
		Seeds:      []string{"http://h0.test/"},
		Politeness: campaign.Politeness{MinDelay: campaign.Duration(delay), MaxConcurrencyPerHost: conc},
	}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	key, _, err := s.CreateCampaign(ctx, name, spec)
	if err != nil {
		t.Fatal(err)
	}
	var raw []string
	for h := range hosts {
		for p := range perHost {
			raw = append(raw, fmt.Sprintf("http://h%d.test/%d", h, p))
		}
	}
	if _, err := s.InsertURLs(ctx, key, urls(t, raw...)); err != nil {
		t.Fatal(err)
	}
	return key
}

func leaseHosts(t *testing.T, s *store.Store, p store.HostLeaseParams) campaign.HostLease {
	t.Helper()
	if p.TTL == 0 {
		p.TTL = time.Minute
	}
	l, err := s.LeaseHosts(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// perHost counts a lease's URLs by shard key.
func perHost(l campaign.HostLease) map[string]int {
	out := map[string]int{}
	for _, b := range l.Batches {
		for _, g := range b.Groups {
			out[g.ShardKey] += len(g.IDs)
		}
	}
	return out
}

// TestLeaseHostsGivesEachHostItsQuota: a host allowed a request a second
// gets about Horizon's worth (4), more only once half of it is settled,
// and every host goes to its owner on the ring.
func TestLeaseHostsGivesEachHostItsQuota(t *testing.T) {
	s := harness.OpenStore(t)
	key := politeCampaign(t, s, t.Name(), time.Second, 1, 3, 10)
	nodes := []campaign.LeaseNode{{ID: "a", Weight: 1, Batches: 4}, {ID: "b", Weight: 2, Batches: 4}}
	p := store.HostLeaseParams{CampaignKey: key, Nodes: nodes, BatchSize: 100, Horizon: 4 * time.Second,
		MinDelay: time.Second, Concurrency: 1}
	l := leaseHosts(t, s, p)
	got := perHost(l)
	if len(got) != 3 {
		t.Fatalf("lease covered hosts %v, want all 3", got)
	}
	for h, n := range got {
		if n != 4 {
			t.Errorf("host %s got %d URLs, want 4 (4s of work at one a second)", h, n)
		}
	}
	r := ring.New(ring.Node{ID: "a", Weight: 1}, ring.Node{ID: "b", Weight: 2})
	for _, b := range l.Batches {
		for _, g := range b.Groups {
			if owner, _ := r.Lookup(g.ShardKey); owner != b.Node {
				t.Errorf("%s went to %s, its owner is %s", g.ShardKey, b.Node, owner)
			}
		}
	}
	// Nothing more while each host has more than half its quota in flight;
	// the lease says when one is likely due.
	again := leaseHosts(t, s, p)
	if again.Size() != 0 || again.NextDue.D() <= 0 || again.NextDue.D() > 5*time.Second {
		t.Fatalf("second lease %+v, want nothing and a next due within the horizon", again)
	}
	// Two of h0's URLs settle: h0 is due again, for two more.
	n1 := holder(t, s, "a", "1")
	var h0 []int64
	for _, b := range l.Batches {
		for _, g := range b.Groups {
			if g.ShardKey == "h0.test" {
				h0 = g.IDs
			}
		}
	}
	if _, err := s.Claim(ctx, key, l.LeaseID, h0, n1, "a", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(ctx, key, n1, "a", []store.Outcome{
		{ID: h0[0], State: store.Failed, Attempted: true, Status: 404},
		{ID: h0[1], State: store.Failed, Attempted: true, Status: 404},
	}, nil); err != nil {
		t.Fatal(err)
	}
	third := perHost(leaseHosts(t, s, p))
	if len(third) != 1 || third["h0.test"] != 2 {
		t.Fatalf("third lease %v, want 2 more of h0 only", third)
	}
}

// TestLeaseHostsKeepsTheWindow: a node with no room gets nothing, its hosts
// wait; a node's room is shared among its due hosts.
func TestLeaseHostsKeepsTheWindow(t *testing.T) {
	s := harness.OpenStore(t)
	key := politeCampaign(t, s, t.Name(), 0, 2, 6, 20)
	full := []campaign.LeaseNode{{ID: "a", Weight: 1, Batches: 0}}
	if l := leaseHosts(t, s, store.HostLeaseParams{CampaignKey: key, Nodes: full, BatchSize: 10, Horizon: 4 * time.Second}); l.Size() != 0 {
		t.Fatalf("a node with a full window got %d URLs", l.Size())
	}
	one := []campaign.LeaseNode{{ID: "a", Weight: 1, Batches: 1}}
	l := leaseHosts(t, s, store.HostLeaseParams{CampaignKey: key, Nodes: one, BatchSize: 10, Horizon: 4 * time.Second})
	if len(l.Batches) != 1 || l.Size() != 10 || !l.More {
		t.Fatalf("lease %d URLs in %d batches, more %v; want one full batch and more waiting", l.Size(), len(l.Batches), l.More)
	}
	for h, n := range perHost(l) {
		if n > 2 {
			t.Errorf("host %s took %d of 10 URLs with 6 hosts due; the room is shared", h, n)
		}
	}
}

// TestPausedHostWaitsForEveryCampaign: a pause (Retry-After) holds the host
// for all campaigns, and the lease says when it ends.
func TestPausedHostWaitsForEveryCampaign(t *testing.T) {
	s := harness.OpenStore(t)
	a := politeCampaign(t, s, t.Name()+"-a", 0, 1, 1, 3)
	b := politeCampaign(t, s, t.Name()+"-b", 0, 1, 1, 3)
	if err := s.PauseHost(ctx, "h0.test", time.Minute); err != nil {
		t.Fatal(err)
	}
	nodes := []campaign.LeaseNode{{ID: "a", Weight: 1, Batches: 1}}
	for _, key := range []int64{a, b} {
		l := leaseHosts(t, s, store.HostLeaseParams{CampaignKey: key, Nodes: nodes, BatchSize: 10, Horizon: 4 * time.Second})
		if l.Size() != 0 || l.Pending != 3 || l.NextDue.D() < 50*time.Second {
			t.Fatalf("campaign %d leased %+v from a paused host, want nothing, due in about a minute", key, l)
		}
	}
}

// TestHostPolicyIsTheStrictestRunning: two running campaigns on one host
// make its delay the longer and its concurrency the smaller; a finished one
// stops counting.
func TestHostPolicyIsTheStrictestRunning(t *testing.T) {
	s := harness.OpenStore(t)
	politeCampaign(t, s, t.Name()+"-fast", time.Second, 2, 1, 1)
	slow := politeCampaign(t, s, t.Name()+"-slow", 2*time.Second, 1, 1, 1)
	pol, err := s.HostPolicies(ctx, []string{"h0.test", "none.test"})
	if err != nil {
		t.Fatal(err)
	}
	if got := pol["h0.test"]; got.MinDelay != 2*time.Second || got.Concurrency != 1 {
		t.Fatalf("policy %+v, want the slow campaign's 2s and 1", got)
	}
	if _, ok := pol["none.test"]; ok {
		t.Fatal("a host no campaign crawls has a policy")
	}
	if _, err := s.FinishCampaign(ctx, slow, campaign.OutcomeCompleted, 1); err != nil {
		t.Fatal(err)
	}
	pol, _ = s.HostPolicies(ctx, []string{"h0.test"})
	if got := pol["h0.test"]; got.MinDelay != time.Second || got.Concurrency != 2 {
		t.Fatalf("policy after the slow campaign ended %+v, want 1s and 2", got)
	}
}

// TestCampaignReachingAHostIsAnnounced: a campaign whose links reach a
// host other campaigns crawl already may be the strictest there now; the
// nodes pacing that host must hear of it then, not only when a campaign
// starts (its seeds may not reach the host, or not yet).
func TestCampaignReachingAHostIsAnnounced(t *testing.T) {
	s := harness.OpenStore(t)
	politeCampaign(t, s, t.Name()+"-fast", time.Second, 1, 1, 1) // crawls h0.test
	spec, err := campaign.Spec{
		Seeds:      []string{"http://elsewhere.test/"},
		Politeness: campaign.Politeness{MinDelay: campaign.Duration(2 * time.Second), MaxConcurrencyPerHost: 1},
	}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	slow, _, err := s.CreateCampaign(ctx, t.Name()+"-slow", spec)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := s.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN "+store.PolicyChannel); err != nil {
		t.Fatal(err)
	}
	if _, err := s.InsertURLs(ctx, slow, urls(t, "http://h0.test/linked")); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := conn.Conn().WaitForNotification(wctx)
	if err != nil {
		t.Fatalf("no announcement once the slow campaign reached h0.test: %v", err)
	}
	if n.Payload != strconv.FormatInt(slow, 10) {
		t.Fatalf("announced campaign %q, want %d", n.Payload, slow)
	}
	pol, err := s.HostPolicies(ctx, []string{"h0.test"})
	if err != nil {
		t.Fatal(err)
	}
	if got := pol["h0.test"]; got.MinDelay != 2*time.Second {
		t.Fatalf("policy %+v, want the slow campaign's 2s", got)
	}
}

// TestHostClaimIsClusterWide: one holder at a time; a refused claim marks
// the host wanted, which its holder learns on renewal; the pace a holder
// leaves is what the next one starts from.
func TestHostClaimIsClusterWide(t *testing.T) {
	s := harness.OpenStore(t)
	a, b := "a@1", "b@1"
	if c, ok, err := claimHost(s, "x.test", a); err != nil || !ok {
		t.Fatalf("first claim %+v %v", c, err)
	}
	if c, ok, err := claimHost(s, "x.test", b); err != nil || ok {
		t.Fatalf("second holder granted %+v %v", c, err)
	}
	held, wanted, err := s.RenewHosts(ctx, a, time.Minute, []store.HeldHost{{ShardKey: "x.test", NextIn: 3 * time.Second, Latency: 200 * time.Millisecond}})
	if err != nil || !held["x.test"] || !wanted["x.test"] {
		t.Fatalf("renew held %v wanted %v (%v), want both", held, wanted, err)
	}
	if held, _, _ := s.RenewHosts(ctx, b, time.Minute, []store.HeldHost{{ShardKey: "x.test"}}); held["x.test"] {
		t.Fatal("a holder renewed a claim it does not have")
	}
	if err := s.ReleaseHost(ctx, a, store.HeldHost{ShardKey: "x.test", NextIn: 3 * time.Second, Latency: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	c, ok, err := claimHost(s, "x.test", b)
	if err != nil || !ok || c.Wait < 2*time.Second || c.Latency != 200*time.Millisecond {
		t.Fatalf("claim after release %+v %v, want granted, about 3s to wait, the latency learned", c, err)
	}
}

// TestHostClaimsComeWithTheirPolicies: claiming many hosts at once grants
// the free ones, each with its strictest policy (none for a host no
// running campaign crawls), and refuses the one another holder has,
// marking it wanted; a key asked twice is claimed once.
func TestHostClaimsComeWithTheirPolicies(t *testing.T) {
	s := harness.OpenStore(t)
	politeCampaign(t, s, t.Name(), 2*time.Second, 1, 1, 1) // crawls h0.test
	a, b := "a@1", "b@1"
	if _, ok, err := claimHost(s, "x.test", a); err != nil || !ok {
		t.Fatalf("a's claim of x.test: %v %v", ok, err)
	}
	got, err := s.ClaimHosts(ctx, []string{"x.test", "h0.test", "y.test", "h0.test"}, b, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("granted %v, want h0.test and y.test", got)
	}
	if c, ok := got["h0.test"]; !ok || c.Policy != (store.HostPolicy{MinDelay: 2 * time.Second, Concurrency: 1}) {
		t.Errorf("h0.test %+v, want granted with its campaign's 2s and 1", c)
	}
	if c, ok := got["y.test"]; !ok || c.Policy != (store.HostPolicy{}) {
		t.Errorf("y.test %+v, want granted with no policy", c)
	}
	if _, wanted, err := s.RenewHosts(ctx, a, time.Minute, []store.HeldHost{{ShardKey: "x.test"}}); err != nil || !wanted["x.test"] {
		t.Errorf("x.test wanted %v (%v), want the refused claim to mark it", wanted, err)
	}
}

// claimHost claims one host: whether it was granted, and the claim.
func claimHost(s *store.Store, key, holder string) (store.HostClaim, bool, error) {
	got, err := s.ClaimHosts(ctx, []string{key}, holder, time.Minute)
	c, ok := got[key]
	return c, ok, err
}

// TestOnlyDeadHoldersLoseTheirRows: an expired lease returns to pending
// only what no live holder has; a holder that stops renewing loses its rows
// at the next lease.
func TestOnlyDeadHoldersLoseTheirRows(t *testing.T) {
	s := harness.OpenStore(t)
	key := politeCampaign(t, s, t.Name(), 0, 1, 1, 2)
	nodes := []campaign.LeaseNode{{ID: "a", Weight: 1, Batches: 1}}
	p := store.HostLeaseParams{CampaignKey: key, Nodes: nodes, BatchSize: 1, Horizon: 4 * time.Second, TTL: time.Minute}
	l := leaseHosts(t, s, p)
	if l.Size() != 1 {
		t.Fatalf("leased %d", l.Size())
	}
	live := holder(t, s, "a", "1")
	if c, err := s.Claim(ctx, key, l.LeaseID, l.Batches[0].IDs(), live, "a", time.Minute); err != nil || len(c) != 1 {
		t.Fatalf("claim %d %v", len(c), err)
	}
	if _, err := s.Pool().Exec(ctx, `UPDATE frontier SET lease_expires_at = now() - interval '1 hour'`); err != nil {
		t.Fatal(err)
	}
	p.BatchSize = 10
	for range 2 {
		for h, n := range perHost(leaseHosts(t, s, p)) {
			if n > 1 {
				t.Fatalf("%s: %d leased; the live holder's URL was taken from it", h, n)
			}
		}
	}
	if err := s.DeregisterNode(ctx, "a", "1"); err != nil {
		t.Fatal(err)
	}
	if got := perHost(leaseHosts(t, s, p)); got["h0.test"] != 1 {
		t.Fatalf("after the holder died the lease took %v, want its URL back", got)
	}
}

func TestRobotsStoredOnceForTheCluster(t *testing.T) {
	s := harness.OpenStore(t)
	if _, ok, err := s.Robots(ctx, "http://x.test"); err != nil || ok {
		t.Fatalf("robots of an unknown origin: %v %v", ok, err)
	}
	if err := s.PutRobots(ctx, "http://x.test", 200, []byte("User-agent: *\nDisallow: /p\n")); err != nil {
		t.Fatal(err)
	}
	f, ok, err := s.Robots(ctx, "http://x.test")
	if err != nil || !ok || f.Status != 200 || string(f.Body) != "User-agent: *\nDisallow: /p\n" || f.Age > time.Minute {
		t.Fatalf("stored robots %+v %v %v", f, ok, err)
	}
}

// TestRestartedNodeDoesNotKeepItsPredecessorsHolds is issue 11, defect 5:
// a node restarted under the same ID is a new holder. Its heartbeats do
// not keep the dead process's URLs held (they return to pending once that
// process's TTL has passed), and it cannot commit them.
func TestRestartedNodeDoesNotKeepItsPredecessorsHolds(t *testing.T) {
	s := harness.OpenStore(t)
	key := newCampaign(t, s, "http://a.test/")
	if _, err := s.InsertURLs(ctx, key, urls(t, "http://a.test/")); err != nil {
		t.Fatal(err)
	}
	l := leaseAll(t, s, key, 10)
	if l.Size() != 1 {
		t.Fatalf("leased %d URLs, want the seed", l.Size())
	}
	seed := ids(l)[0]
	register := func(incarnation string) string {
		reg := store.Registration{ID: "n", Weight: 1, Incarnation: incarnation, TTL: time.Second}
		if err := s.RegisterNode(ctx, reg); err != nil {
			t.Fatal(err)
		}
		return store.HolderToken("n", incarnation)
	}
	dead := register("1")
	if c, err := s.Claim(ctx, key, l.LeaseID, []int64{seed}, dead, "n", time.Minute); err != nil || len(c) != 1 {
		t.Fatalf("claim: %d (%v)", len(c), err)
	}
	restarted := register("2") // the process died; its successor starts under the same ID
	page := &store.Page{Status: 200, FetchedAt: time.Now(), Duration: time.Millisecond}
	res, err := s.Commit(ctx, key, restarted, "n", []store.Outcome{{ID: seed, State: store.Fetched, Attempted: true, Status: 200, Page: page}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Accepted[seed] {
		t.Fatal("the restarted node committed a URL its dead predecessor held")
	}
	harness.Eventually(t, 30*time.Second, "the dead process's URL to be leased again while its successor heartbeats", func() bool {
		if err := s.HeartbeatNode(ctx, "n", "2", true); err != nil {
			t.Fatal(err)
		}
		return slices.Contains(ids(leaseAll(t, s, key, 10)), seed)
	})
}
