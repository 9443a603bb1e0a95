package store

import (
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/politeness"
)

// TestPlanLeaseHoldsBackBusyHosts: a host with more than half its quota in
// flight waits, and the plan says when it is likely due.
func TestPlanLeaseHoldsBackBusyHosts(t *testing.T) {
	p := HostLeaseParams{BatchSize: 100, Horizon: 4 * time.Second}
	p.Nodes = append(p.Nodes, nodeRoom("a", 4))
	pace := politeness.Pace{Interval: time.Second, Concurrency: 1}
	plan := planLease(p, []hostCandidate{
		{id: 1, key: "busy", pace: pace, inflight: 3},
		{id: 2, key: "half", pace: pace, inflight: 2},
		{id: 3, key: "idle", pace: pace, inflight: 0},
	})
	got := map[string]int{}
	for _, tk := range plan.takes {
		got[tk.key] = tk.take
	}
	if len(got) != 2 || got["half"] != 2 || got["idle"] != 4 {
		t.Fatalf("takes %v, want half: 2, idle: 4, busy none", got)
	}
	if plan.eta < 500*time.Millisecond || plan.eta > 2*time.Second {
		t.Fatalf("eta %v, want about a second (one request of the busy host)", plan.eta)
	}
}

func nodeRoom(id string, batches int) campaign.LeaseNode {
	return campaign.LeaseNode{ID: id, Weight: 1, Batches: batches}
}

// TestANodesBatchesShareItsHosts: a lease's batches for a node each hold
// a part of every host's URLs, the first the first part, so that the node
// ends them in turn; none is over size, every URL is in one, and a host's
// URLs keep their order across them.
func TestANodesBatchesShareItsHosts(t *testing.T) {
	plan := leasePlan{takes: []hostTake{
		{hostID: 1, key: "a", node: "n1"}, {hostID: 2, key: "b", node: "n1"}, {hostID: 3, key: "c", node: "n1"},
		{hostID: 4, key: "d", node: "n2"},
	}}
	leased := map[int64][]int64{
		1: {18, 11, 12, 13, 14, 15, 16, 17}, 2: {21, 22, 23, 24, 25, 26, 27, 28}, 3: {31}, 4: {41, 42},
	}
	batches := plan.batches(leased, 6)
	var n1 []campaign.NodeBatch
	seen := map[int64]int{}
	last := map[string]int64{}
	for i, b := range batches {
		if len(b.IDs()) > 6 {
			t.Errorf("batch %d holds %d URLs, want at most 6", i, len(b.IDs()))
		}
		if b.Node == "n1" {
			n1 = append(n1, b)
		}
		for _, g := range b.Groups {
			for _, id := range g.IDs {
				seen[id]++
				if id < last[g.ShardKey] {
					t.Errorf("host %s: URL %d after %d", g.ShardKey, id, last[g.ShardKey])
				}
				last[g.ShardKey] = id
			}
		}
	}
	if len(seen) != 19 {
		t.Errorf("%d URLs in the batches, want all 19", len(seen))
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("URL %d in %d batches", id, n)
		}
	}
	if len(n1) != 3 {
		t.Fatalf("%d batches for n1, want 3 (17 URLs, 6 a batch)", len(n1))
	}
	first := map[string][]int64{}
	for _, g := range n1[0].Groups {
		first[g.ShardKey] = g.IDs
	}
	if len(first["a"]) == 0 || len(first["b"]) == 0 || first["a"][0] != 11 || first["b"][0] != 21 || len(first["c"]) != 1 {
		t.Fatalf("n1's first batch %v: want the first URLs of a, b and c", n1[0].Groups)
	}
}
