package integration

import (
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/config"
	"github.com/spiderpool/spiderpool/tests/harness"
	"github.com/spiderpool/spiderpool/tests/synthweb"
)

// poolCrawl crawls a fresh copy of the polite web on the nodes start
// gives a fresh stack, and returns what the campaign cost its Temporal
// histories, with the pages it fetched.
func poolCrawl(t *testing.T, name string, start func(*harness.Stack)) (harness.HistoryCost, int64) {
	t.Helper()
	web := harness.StartWeb(t, synthweb.Config{Hosts: 40, Pages: 1000, LinksPerPage: 4, Seed: 53, Latency: 5 * time.Millisecond})
	s := harness.NewStack(t)
	start(s)
	spec := loopbackSpec(web)
	spec.Seeds = web.Roots()
	spec.Politeness = campaign.Politeness{MaxConcurrencyPerHost: 1, MinDelay: campaign.Duration(200 * time.Millisecond)}
	id := name + "-" + s.Name
	sum := harness.RunCampaign(t, s, id, spec, 3*time.Minute)
	if missing, dup := web.Tally(); missing > 0 || dup > 0 || sum.Fetched != int64(len(web.Pages())) {
		t.Fatalf("%s: fetched %d of %d pages, %d missing and %d fetched twice by the web's log",
			name, sum.Fetched, len(web.Pages()), missing, dup)
	}
	return harness.CampaignHistoryCost(t, s.Client, id), sum.Fetched
}

// TestControlPlaneCostDoesNotGrowWithThePool: the same polite campaign on
// 50 node identities in one process (worker --replicas 50) costs the
// campaign's Temporal histories, per page, what it costs on 3 nodes, within
// half again: history events, activities and local activities. Before pool
// runs, a lease cut each node its hosts' share, so 50 nodes meant many
// more, smaller batches, each an activity and about 7 events. Counts, not
// timings.
func TestControlPlaneCostDoesNotGrowWithThePool(t *testing.T) {
	three, pages3 := poolCrawl(t, "three", func(s *harness.Stack) {
		s.StartNode("a", 1)
		s.StartNode("b", 1)
		s.StartNode("c", 2)
	})
	fifty, pages50 := poolCrawl(t, "fifty", func(s *harness.Stack) {
		s.StartNodeWith("pool", 1, func(c *config.Config) { c.Node.Replicas = 50 })
	})
	per := func(c harness.HistoryCost, pages int64) [3]float64 {
		return [3]float64{
			harness.PerThousand(c.Events, pages),
			harness.PerThousand(c.Activities, pages),
			harness.PerThousand(c.LocalActivities, pages),
		}
	}
	p3, p50 := per(three, pages3), per(fifty, pages50)
	t.Logf("per 1,000 pages: 3 nodes %.0f events, %.1f activities, %.0f local activities (%d runs); "+
		"50 replicas %.0f events, %.1f activities, %.0f local activities (%d runs)",
		p3[0], p3[1], p3[2], three.Runs, p50[0], p50[1], p50[2], fifty.Runs)
	for i, what := range []string{"history events", "activities", "local activities"} {
		if p50[i] > 1.5*max(p3[i], 1) {
			t.Errorf("%s per 1,000 pages: %.1f on 50 replicas against %.1f on 3 nodes, over 1.5 times", what, p50[i], p3[i])
		}
	}
	if fifty.Activities > 2+2*fifty.Runs {
		t.Errorf("%d activities on 50 replicas: a pool run schedules none per batch", fifty.Activities)
	}
}

// TestReplicasAreNodesOfTheirOwn: each of a process's node identities
// registers, holds its own claims and fetches its own hosts: a campaign on
// one process of 8 replicas spreads its hosts over them, each page once.
func TestReplicasAreNodesOfTheirOwn(t *testing.T) {
	web := harness.StartWeb(t, synthweb.Config{Hosts: 24, Pages: 600, LinksPerPage: 4, Seed: 59, Latency: 2 * time.Millisecond})
	s := harness.NewStack(t)
	s.StartNodeWith("r", 1, func(c *config.Config) { c.Node.Replicas = 8 })
	registered := s.Strings(`SELECT id FROM nodes WHERE id LIKE $1 ORDER BY id`, s.NodeID("r")+"-%")
	if len(registered) != 8 || registered[0] != s.NodeID("r")+"-1" || registered[7] != s.NodeID("r")+"-8" {
		t.Fatalf("registered %v, want %s-1 to -8", registered, s.NodeID("r"))
	}
	spec := loopbackSpec(web)
	spec.Seeds = web.Roots()
	sum := harness.RunCampaign(t, s, "replicas-"+s.Name, spec, 2*time.Minute)
	if missing, dup := web.Tally(); missing > 0 || dup > 0 {
		t.Fatalf("%d pages missing, %d fetched twice", missing, dup)
	}
	if len(sum.PerNode) < 4 {
		t.Errorf("pages per node %v: 24 hosts over 8 identities reached only %d of them", sum.PerNode, len(sum.PerNode))
	}
	holders := s.Strings(`SELECT DISTINCT split_part(holder, '@', 1) FROM holders WHERE holder LIKE $1`, s.NodeID("r")+"-%")
	if len(holders) != 8 {
		t.Errorf("holder tokens of %v, want one per identity", holders)
	}
	t.Logf("pages per identity %v", sum.PerNode)
}
