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
