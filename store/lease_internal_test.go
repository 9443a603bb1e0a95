package store

import (
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/campaign"
)

// TestQuotaFollowsThePace: a host's work in flight is what it can do in
// the horizon at its allowed rate, whichever bounds it: the delay, or the
// time to answer over its concurrency.
func TestQuotaFollowsThePace(t *testing.T) {
	h := 4 * time.Second
	for _, c := range []struct {
		name string
		pace hostPace
		want int
	}{
		{"a second apart", hostPace{interval: time.Second, latency: 200 * time.Millisecond, concurrency: 1}, 4},
		{"slower to answer than its delay", hostPace{interval: time.Second, latency: 2 * time.Second, concurrency: 1}, 2},
		{"two at a time, a second each", hostPace{latency: time.Second, concurrency: 2}, 8},
		{"a long crawl-delay", hostPace{interval: 30 * time.Second, concurrency: 1}, 1},
		{"nothing known", hostPace{concurrency: 2}, 100},
		{"fast", hostPace{latency: time.Millisecond, concurrency: 4}, 100},
	} {
		if got := c.pace.quota(h, 100); got != c.want {
			t.Errorf("%s: quota %d, want %d", c.name, got, c.want)
		}
	}
}

// TestPlanLeaseHoldsBackBusyHosts: a host with more than half its quota in
// flight waits, and the plan says when it is likely due.
func TestPlanLeaseHoldsBackBusyHosts(t *testing.T) {
	p := HostLeaseParams{BatchSize: 100, Horizon: 4 * time.Second}
	p.Nodes = append(p.Nodes, nodeRoom("a", 4))
	pace := hostPace{interval: time.Second, concurrency: 1}
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
