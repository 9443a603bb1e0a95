package store

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/politeness"
	"github.com/spiderpool/spiderpool/ring"
)

// renderCase is a pool of three plain nodes and two with a browser, and
// 200 hosts due of which every other one renders.
func renderCase() (HostLeaseParams, []hostCandidate) {
	p := HostLeaseParams{BatchSize: 100, Horizon: 4 * time.Second}
	p.Nodes = []campaign.LeaseNode{
		{ID: "a", Weight: 1, Batches: 1000},
		{ID: "b", Weight: 2, Batches: 1000},
		{ID: "c", Weight: 1, Batches: 1000},
		{ID: "d", Weight: 1, Batches: 1000, Browser: true},
		{ID: "e", Weight: 3, Batches: 1000, Browser: true},
	}
	p.Render = func(key string) bool { return strings.HasPrefix(key, "spa") }
	pace := politeness.Pace{Interval: time.Second, Concurrency: 1}
	var cands []hostCandidate
	for i := range 200 {
		key := fmt.Sprintf("plain%d.example", i)
		if i%2 == 0 {
			key = fmt.Sprintf("spa%d.example", i)
		}
		cands = append(cands, hostCandidate{id: int64(i + 1), key: key, pace: pace})
	}
	return p, cands
}

func ringOf(nodes []campaign.LeaseNode, keep func(campaign.LeaseNode) bool) *ring.Ring {
	var members []ring.Node
	for _, n := range nodes {
		if keep(n) {
			members = append(members, ring.Node{ID: n.ID, Weight: n.Weight})
		}
	}
	return ring.New(members...)
}

// TestPlanLeaseRoutesRenderHostsToBrowserNodes: a render host goes to its
// owner among the nodes with a browser (the same weighted hash over them
// alone), a plain host to its owner among all nodes.
func TestPlanLeaseRoutesRenderHostsToBrowserNodes(t *testing.T) {
	p, cands := renderCase()
	all := ringOf(p.Nodes, func(campaign.LeaseNode) bool { return true })
	browsers := ringOf(p.Nodes, func(n campaign.LeaseNode) bool { return n.Browser })
	browser := map[string]bool{"d": true, "e": true}
	plan := planLease(p, cands)
	if len(plan.takes) != len(cands) || plan.renderWaiting != 0 {
		t.Fatalf("%d takes, %d render hosts waiting; want %d takes, none waiting", len(plan.takes), plan.renderWaiting, len(cands))
	}
	plainOnBrowser := 0
	for _, tk := range plan.takes {
		if p.Render(tk.key) {
			want, _ := browsers.Lookup(tk.key)
			if !browser[tk.node] || tk.node != want {
				t.Errorf("render host %s went to %s, want %s (its owner among the browser nodes)", tk.key, tk.node, want)
			}
			continue
		}
		if want, _ := all.Lookup(tk.key); tk.node != want {
			t.Errorf("plain host %s went to %s, want %s (its owner on the full ring)", tk.key, tk.node, want)
		}
		if browser[tk.node] {
			plainOnBrowser++
		}
	}
	if plainOnBrowser == 0 {
		t.Errorf("no plain host went to a browser node: plain hosts must use every node")
	}
}

// TestPlanLeaseHoldsRenderHostsWithoutBrowser: with no node that has a
// browser (none in the pool, or all drained), render hosts are skipped
// and counted, plain hosts routed as ever, and the walk moves on.
func TestPlanLeaseHoldsRenderHostsWithoutBrowser(t *testing.T) {
	for name, browser := range map[string]func(*campaign.LeaseNode){
		"none":    func(n *campaign.LeaseNode) { n.Browser = false },
		"drained": func(n *campaign.LeaseNode) { n.Weight = 0 },
	} {
		t.Run(name, func(t *testing.T) {
			p, cands := renderCase()
			for i := range p.Nodes {
				if p.Nodes[i].Browser {
					browser(&p.Nodes[i])
				}
			}
			all := ringOf(p.Nodes, func(campaign.LeaseNode) bool { return true })
			plan := planLease(p, cands)
			if plan.renderWaiting != len(cands)/2 {
				t.Errorf("%d render hosts waiting, want %d", plan.renderWaiting, len(cands)/2)
			}
			if len(plan.takes) != len(cands)/2 {
				t.Errorf("%d takes, want %d (the plain hosts)", len(plan.takes), len(cands)/2)
			}
			for _, tk := range plan.takes {
				if p.Render(tk.key) {
					t.Errorf("render host %s went to %s with no browser node", tk.key, tk.node)
				}
				if want, _ := all.Lookup(tk.key); tk.node != want {
					t.Errorf("plain host %s went to %s, want %s", tk.key, tk.node, want)
				}
			}
			if plan.more || plan.eta != 0 {
				t.Errorf("more %v, eta %v: hosts waiting for a browser are neither more work nor due soon", plan.more, plan.eta)
			}
			if want := cands[len(cands)-1].id; plan.last != want {
				t.Errorf("walk stopped at host %d, want %d: the hosts waiting are passed", plan.last, want)
			}
		})
	}
}

// TestPlanLeaseRenderOnlyWalkMoves: a walk of render hosts alone, with no
// browser node, gives no work yet still moves the cursor past them, so
// hosts beyond a full walk of them are reached.
func TestPlanLeaseRenderOnlyWalkMoves(t *testing.T) {
	p, cands := renderCase()
	p.Nodes = p.Nodes[:3]
	var spa []hostCandidate
	for _, c := range cands {
		if p.Render(c.key) {
			spa = append(spa, c)
		}
	}
	plan := planLease(p, spa)
	if len(plan.takes) != 0 || plan.renderWaiting != len(spa) || plan.last != spa[len(spa)-1].id {
		t.Fatalf("takes %d, waiting %d, last %d; want 0, %d, %d", len(plan.takes), plan.renderWaiting, plan.last,
			len(spa), spa[len(spa)-1].id)
	}
}

// TestPlanLeaseWithoutRenderIgnoresBrowsers: with no render spec, the
// browser flag changes nothing.
func TestPlanLeaseWithoutRenderIgnoresBrowsers(t *testing.T) {
	p, cands := renderCase()
	p.Render = nil
	withFlags := planLease(p, cands)
	for i := range p.Nodes {
		p.Nodes[i].Browser = false
	}
	if without := planLease(p, cands); !reflect.DeepEqual(withFlags, without) {
		t.Fatalf("plan with browser flags %+v differs from without %+v", withFlags, without)
	}
	if withFlags.renderWaiting != 0 || len(withFlags.takes) != len(cands) {
		t.Fatalf("%d takes, %d waiting; want %d, 0", len(withFlags.takes), withFlags.renderWaiting, len(cands))
	}
}
