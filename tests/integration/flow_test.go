package integration

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/tests/harness"
	"github.com/spiderpool/spiderpool/tests/synthweb"
)

// watcher polls campaigns' status and remembers every node state seen and
// the most pages fetched.
type watcher struct {
	mu      sync.Mutex
	states  map[string]bool
	fetched map[string]int64
}

func watch(t *testing.T, s *harness.Stack, ids ...string) (*watcher, func()) {
	w := &watcher{states: map[string]bool{}, fetched: map[string]int64{}}
	ctx, cancel := context.WithCancel(bg)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			for _, id := range ids {
				st, err := s.Campaigns.Status(ctx, id)
				if err != nil {
					continue // not started yet, or finished
				}
				w.mu.Lock()
				for _, n := range st.Nodes {
					w.states[n.State] = true
				}
				w.fetched[id] = max(w.fetched[id], st.Counters.Fetched)
				w.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return w, func() { cancel(); <-done }
}

// TestSlowHostDoesNotStarveASecondCampaign, at small scale: one campaign
// crawls a single host that answers in a second, two requests at a time; a
// second campaign crawls twenty polite hosts on the same three nodes
// meanwhile. The second finishes while the first still runs, every node
// stays active, and both fetch every page exactly once.
func TestSlowHostDoesNotStarveASecondCampaign(t *testing.T) {
	slowWeb := harness.StartWeb(t, synthweb.Config{Hosts: 1, Pages: 60, LinksPerPage: 2, Seed: 31, Latency: time.Second})
	politeWeb := harness.StartWeb(t, synthweb.Config{Hosts: 20, Pages: 200, LinksPerPage: 3, Seed: 32, Latency: 20 * time.Millisecond})
	s := harness.NewStack(t)
	s.StartNode("a", 1)
	s.StartNode("b", 1)
	s.StartNode("c", 2)

	slowID, politeID := "slow-"+s.Name, "polite-"+s.Name
	slow := loopbackSpec(slowWeb)
	slow.Politeness.MaxConcurrencyPerHost = 2
	polite := loopbackSpec(politeWeb)
	polite.Seeds = politeWeb.Roots()
	polite.Politeness = campaign.Politeness{MaxConcurrencyPerHost: 1, MinDelay: campaign.Duration(100 * time.Millisecond)}

	w, stopWatching := watch(t, s, slowID, politeID)
	slowRun, err := s.Campaigns.Start(bg, slowID, slow)
	if err != nil {
		t.Fatal(err)
	}
	// The slow host's batches are on the nodes before the second campaign
	// starts.
	harness.Eventually(t, time.Minute, "the slow campaign's first pages", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.fetched[slowID] >= 4
	})
	politeRun, err := s.Campaigns.Start(bg, politeID, polite)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg, 5*time.Minute)
	defer cancel()
	var politeSum, slowSum campaign.Summary
	if err := politeRun.Get(ctx, &politeSum); err != nil {
		t.Fatal(err)
	}
	slowStatus, err := s.Campaigns.Status(ctx, slowID)
	if err != nil {
		t.Fatalf("the slow campaign should still be running when the second ends: %v", err)
	}
	if err := slowRun.Get(ctx, &slowSum); err != nil {
		t.Fatal(err)
	}
	stopWatching()

	if slowStatus.Counters.Fetched >= int64(len(slowWeb.Pages())) {
		t.Errorf("the slow campaign had fetched all its %d pages before the second finished: the test proves nothing", slowStatus.Counters.Fetched)
	}
	for state := range w.states {
		if state != campaign.NodeActive {
			t.Errorf("a node was %s; busy nodes must stay active", state)
		}
	}
	assertEveryPageOnce(t, slowWeb, slowSum)
	assertEveryPageOnce(t, politeWeb, politeSum)
	t.Logf("second campaign: %d pages done while the slow one had %d of %d; node states seen %v",
		politeSum.Fetched, slowStatus.Counters.Fetched, len(slowWeb.Pages()), w.states)
}

// assertEveryPageOnce checks a web's access log against a campaign that
// crawled it alone.
func assertEveryPageOnce(t *testing.T, web *synthweb.Web, sum campaign.Summary) {
	t.Helper()
	missing, dups := web.Tally()
	if missing > 0 || dups > 0 || sum.Fetched != int64(len(web.Pages())) || sum.Pending != 0 || sum.Leased != 0 {
		t.Errorf("%s: %d pages missing, %d fetched twice; summary fetched %d of %d, %d pending, %d leased",
			web.Seed(), missing, dups, sum.Fetched, len(web.Pages()), sum.Pending, sum.Leased)
	}
}
