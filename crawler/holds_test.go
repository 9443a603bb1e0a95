package crawler_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/crawler"
	"github.com/spiderpool/spiderpool/store"
	"github.com/spiderpool/spiderpool/tests/harness"
)

// TestURLTakenAgainByItsHolderIsNotStranded is issue 11, defect 5 on the
// node: a node whose holder token lapsed (its registry heartbeat came late)
// loses its queued URLs to the next lease, which may route them straight
// back to it. The node then holds them under the new lease while its first
// batch still has them queued. When that batch hands them back, they must
// go back to pending: left leased to a live holder with no batch to fetch
// them, they would never be fetched and the campaign would never end.
func TestURLTakenAgainByItsHolderIsNotStranded(t *testing.T) {
	s := harness.OpenStore(t)
	ctx := context.Background()
	site := newPoliteSite(t)
	// Ten seconds between requests: the first URL is fetched at once, the
	// others wait in the node's queue for the whole test.
	pol := campaign.Politeness{MinDelay: campaign.Duration(10 * time.Second), IgnoreRobots: true}
	first := leasedBatch(t, s, site, "retaken", "n1", 3, pol)
	f, tmp := startFetch(t, s, "n1")
	if _, pending, err := tmp.accept(ctx, f, first, "first"); err != nil || !pending {
		t.Fatalf("accept the first batch: pending %v, %v", pending, err)
	}
	holder := store.HolderToken("n1", "1")
	if _, err := s.Pool().Exec(ctx, `UPDATE holders SET alive_until = now() - interval '1 second' WHERE holder = $1`, holder); err != nil {
		t.Fatal(err)
	}
	again, err := s.LeaseHosts(ctx, store.HostLeaseParams{
		CampaignKey: first.CampaignKey, Nodes: []campaign.LeaseNode{{ID: "n1", Weight: 1, Batches: 1}},
		BatchSize: 1000, Horizon: time.Hour, TTL: time.Minute,
	})
	if err != nil || len(again.Batches) != 1 {
		t.Fatalf("lease after the holder lapsed: %+v (%v), want its queued URLs in one batch", again, err)
	}
	if err := s.HeartbeatNode(ctx, "n1", "1", true); err != nil { // the late heartbeat arrives
		t.Fatal(err)
	}
	second := first
	second.LeaseID, second.IDs = again.LeaseID, again.Batches[0].IDs()
	res, pending, err := tmp.accept(ctx, f, second, "second")
	if err != nil || pending || res.Skipped != len(second.IDs) {
		t.Fatalf("second batch: %+v pending %v (%v); want its %d URLs skipped, already queued on the node", res, pending, err, len(second.IDs))
	}

	// The first batch is stopped: it hands back what it has queued.
	f.StopCampaign(first.CampaignKey)
	if c := tmp.await(t, "first"); c.result.Released == 0 {
		t.Fatalf("first batch ended with %+v, want its queued URLs handed back", c.result)
	}
	if st := states(t, s, first.CampaignKey); st[store.Leased] != 0 || st[store.Fetched] != 1 || st[store.Pending] != 2 {
		t.Fatalf("frontier %v after the hand-back; want the first URL fetched, the two queued back to pending, none leased", st)
	}
	if n := site.served(); n != 1 {
		t.Fatalf("site served %d requests, want 1 (the URL fetched before the lapse)", n)
	}
}

// TestNodeWithALateHeartbeatFetchesNothing: a process whose registry
// heartbeat has not been taken for most of its TTL (Postgres too busy)
// may have lost its holder token. Leases then return what it claimed to
// pending and route it to other nodes, which fetch it: the process must
// not fetch it as well. It hands its URLs back instead, and they are
// fetched once, by whoever leases them next.
func TestNodeWithALateHeartbeatFetchesNothing(t *testing.T) {
	s := harness.OpenStore(t)
	ctx := context.Background()
	site := newPoliteSite(t)
	req := leasedBatch(t, s, site, "late", "n1", 3, campaign.Politeness{IgnoreRobots: true})
	live := &crawler.Liveness{}
	then := time.Now().Add(-time.Minute)
	live.Beat(then, then, 15*time.Second) // the last beat Postgres took
	f, tmp := startFetchLive(t, s, "n1", live)
	if _, pending, err := tmp.accept(ctx, f, req, "late"); err != nil || !pending {
		t.Fatalf("accept: pending %v, %v", pending, err)
	}
	if c := tmp.await(t, "late"); c.err != nil || c.result.Fetched != 0 || c.result.Released != 3 {
		t.Fatalf("batch ended %+v (%v), want its 3 URLs handed back, none fetched", c.result, c.err)
	}
	if st := states(t, s, req.CampaignKey); st[store.Pending] != 3 {
		t.Fatalf("frontier %v, want the 3 URLs pending again", st)
	}
	if n := site.served(); n != 0 {
		t.Fatalf("site served %d requests, want none", n)
	}
}

// TestNodeWhoseHeartbeatCameLateHandsBackWhatItClaimedBefore: a heartbeat
// taken after the token's time ran out revives the token, but what the
// process claimed before may have gone to other nodes meanwhile: it hands
// those URLs back, unfetched, and fetches what it claims from then on.
func TestNodeWhoseHeartbeatCameLateHandsBackWhatItClaimedBefore(t *testing.T) {
	s := harness.OpenStore(t)
	ctx := context.Background()
	site := newPoliteSite(t)
	// Three seconds apart: the first URL is fetched at once, the others
	// wait in the node's queue while the late heartbeat arrives.
	pol := campaign.Politeness{MinDelay: campaign.Duration(3 * time.Second), IgnoreRobots: true}
	req := leasedBatch(t, s, site, "revived", "n1", 3, pol)
	live := &crawler.Liveness{}
	now := time.Now()
	live.Beat(now, now, 15*time.Second)
	f, tmp := startFetchLive(t, s, "n1", live)
	if _, pending, err := tmp.accept(ctx, f, req, "before"); err != nil || !pending {
		t.Fatalf("accept: pending %v, %v", pending, err)
	}
	harness.Eventually(t, time.Minute, "the first request", func() bool { return site.served() == 1 })
	sent := time.Now()
	live.Beat(sent, sent.Add(time.Minute), 15*time.Second) // taken a minute after it was sent
	if c := tmp.await(t, "before"); c.err != nil || c.result.Fetched != 1 || c.result.Released != 2 {
		t.Fatalf("batch ended %+v (%v), want 1 fetched and the 2 queued handed back", c.result, c.err)
	}
	if st := states(t, s, req.CampaignKey); st[store.Pending] != 2 || st[store.Fetched] != 1 {
		t.Fatalf("frontier %v, want 1 fetched, 2 pending again", st)
	}
	if n := site.served(); n != 1 {
		t.Fatalf("site served %d requests, want 1", n)
	}
}

// TestBatchDeliveredAgainWhileStoppingKeepsItsURLs: a batch delivered a
// second time (Temporal retried the activity) while the node is stopping
// is handed back at once, but only what that delivery claimed: a URL the
// node is fetching from the first delivery stays its own and is committed.
// Handing it back would record the page as never fetched, and it would be
// fetched again.
func TestBatchDeliveredAgainWhileStoppingKeepsItsURLs(t *testing.T) {
	s := harness.OpenStore(t)
	ctx := context.Background()
	arrived, answer := make(chan struct{}, 1), make(chan struct{})
	site := &politeSite{agents: map[string]int{}}
	site.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		site.mu.Lock()
		site.times = append(site.times, time.Now())
		site.mu.Unlock()
		arrived <- struct{}{}
		<-answer
		fmt.Fprint(w, "ok")
	}))
	t.Cleanup(site.Close)
	req := leasedBatch(t, s, site, "again", "n1", 1, campaign.Politeness{IgnoreRobots: true})
	f, tmp := startFetch(t, s, "n1")
	var once sync.Once
	release := func() { once.Do(func() { close(answer) }) }
	t.Cleanup(release) // before the engine's Stop, which waits for the request
	if _, pending, err := tmp.accept(ctx, f, req, "first"); err != nil || !pending {
		t.Fatalf("accept: pending %v, %v", pending, err)
	}
	select {
	case <-arrived:
	case <-time.After(time.Minute):
		t.Fatal("the request never reached the site")
	}
	stopped := make(chan error, 1)
	go func() {
		stopCtx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		stopped <- f.Stop(stopCtx)
	}()
	harness.Eventually(t, time.Minute, "the node to begin stopping", f.Stopping)
	res, pending, err := tmp.accept(ctx, f, req, "again")
	if err != nil || pending || res.Released != 0 || res.Skipped != 1 {
		t.Fatalf("second delivery while stopping: %+v pending %v (%v); want its one URL skipped, in flight from the first", res, pending, err)
	}
	release()
	if c := tmp.await(t, "first"); c.err != nil || c.result.Fetched != 1 {
		t.Fatalf("first delivery ended %+v (%v), want its URL fetched", c.result, c.err)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if st := states(t, s, req.CampaignKey); st[store.Fetched] != 1 {
		t.Fatalf("frontier %v, want the URL fetched", st)
	}
}
