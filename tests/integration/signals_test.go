package integration

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/ring"
	"github.com/spiderpool/spiderpool/tests/harness"
	"github.com/spiderpool/spiderpool/tests/synthweb"
)

// historyRow is one row of node_weight_history.
type historyRow struct {
	node               string
	oldWeight, weight  float64
	oldState, newState string
	reason             string
	afterLease         int64
}

func ringHistory(t *testing.T, s *harness.Stack) []historyRow {
	t.Helper()
	rows, err := s.Store.Pool().Query(bg, `SELECT node, old_weight, new_weight, old_state, new_state, reason, after_lease
		FROM node_weight_history ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []historyRow
	for rows.Next() {
		var r historyRow
		if err := rows.Scan(&r.node, &r.oldWeight, &r.weight, &r.oldState, &r.newState, &r.reason, &r.afterLease); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("node_weight_history: %v", err)
	}
	return out
}

// assertRoutedByHistory replays node_weight_history against the pages: every
// fetched URL was fetched by the owner of its host under the ring in effect
// when its lease was dispatched.
func assertRoutedByHistory(t *testing.T, s *harness.Stack, history []historyRow) map[string]int {
	t.Helper()
	rows, err := s.Store.Pool().Query(bg, `SELECT f.shard_key, f.lease_id, p.node FROM pages p JOIN frontier f ON f.id = p.url_id ORDER BY f.lease_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	r := ring.New()
	next := 0
	wrong, checked := 0, 0
	perNode := map[string]int{}
	for rows.Next() {
		var key, node string
		var lease int64
		if err := rows.Scan(&key, &lease, &node); err != nil {
			t.Fatal(err)
		}
		for next < len(history) && history[next].afterLease < lease {
			r.Set(history[next].node, history[next].weight)
			next++
		}
		checked++
		perNode[node]++
		if owner, _ := r.Lookup(key); owner != node {
			wrong++
			if wrong <= 3 {
				t.Errorf("host %s (lease %d) fetched by %s; the ring then said %s", key, lease, node, owner)
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("pages by lease: %v", err)
	}
	if wrong > 0 || checked == 0 {
		t.Fatalf("%d of %d pages fetched off the ring in effect", wrong, checked)
	}
	return perNode
}

func waitFetched(t *testing.T, s *harness.Stack, id string, n int64) campaign.Status {
	t.Helper()
	var st campaign.Status
	harness.Eventually(t, 2*time.Minute, "campaign to fetch enough pages", func() bool {
		var err error
		st, err = s.Campaigns.Status(bg, id)
		return err == nil && st.Counters.Fetched >= n
	})
	return st
}

// TestReweightAndDrainMidCampaign: a reweight and a drain sent mid-campaign
// change which node fetches which hosts, the drained node gets no batch
// after the drain, nothing is lost, and every change has a
// node_weight_history row.
func TestReweightAndDrainMidCampaign(t *testing.T) {
	web := harness.StartWeb(t, synthweb.Config{
		Hosts: 24, Pages: 4000, LinksPerPage: 6, CrossHostFraction: 0.3, Seed: 11, Latency: 2 * time.Millisecond,
	})
	s := harness.NewStack(t)
	a, b, c := s.StartNode("a", 1), s.StartNode("b", 1), s.StartNode("c", 2)
	id := "signals-" + s.Name
	spec := loopbackSpec(web)
	spec.Politeness.MaxConcurrencyPerHost = 1
	spec.Dispatch.BatchSize = 50
	run, err := s.Campaigns.Start(bg, id, spec)
	if err != nil {
		t.Fatal(err)
	}

	waitFetched(t, s, id, 600)
	// c's share goes from 2 of 4 to 0.25 of 2.25: each of its hosts moves
	// with p = 0.39, and none of 24 moves in one run in 100,000 (at 0.5,
	// one in 5,000).
	ns, err := s.Campaigns.Reweight(bounded(t, time.Minute), id, c, 0.25)
	if err != nil || ns.Override == nil || *ns.Override != 0.25 {
		t.Fatalf("reweight: %+v, %v", ns, err)
	}
	st := waitFetched(t, s, id, 1800)
	drained, err := s.Campaigns.Drain(bounded(t, time.Minute), id, b)
	if err != nil {
		t.Fatal(err)
	}
	if drained.State != campaign.NodeDraining && drained.State != campaign.NodeDrained {
		t.Fatalf("drained node state %q", drained.State)
	}
	t.Logf("drain at %d fetched; %s had %d batches", st.Counters.Fetched, b, drained.BatchesSent)

	ctx, cancel := context.WithTimeout(bg, 3*time.Minute)
	defer cancel()
	var sum campaign.Summary
	if err := run.Get(ctx, &sum); err != nil {
		t.Fatal(err)
	}
	assertExactlyOnce(t, s, web, sum)

	// The drained node got no batch after the drain and ended drained.
	final, err := s.Campaigns.Status(bg, id) // a closed workflow still answers queries
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range final.Nodes {
		if n.ID == b && (n.BatchesSent != drained.BatchesSent || n.State != campaign.NodeDrained) {
			t.Fatalf("%s: %d batches at the drain, %d at the end, state %s", b, drained.BatchesSent, n.BatchesSent, n.State)
		}
	}

	// Every change is in the history, and the history explains every page.
	history := ringHistory(t, s)
	want := []string{"joined", "joined", "joined", "signal reweight", "signal drain"}
	var reasons []string
	for _, h := range history {
		reasons = append(reasons, h.reason)
	}
	for _, w := range want {
		if !slices.Contains(reasons, w) {
			t.Fatalf("history reasons %v lack %q", reasons, w)
		}
	}
	for _, h := range history {
		if h.reason == "signal reweight" && (h.node != c || h.oldWeight != 2 || h.weight != 0.25) {
			t.Errorf("reweight row %+v", h)
		}
		if h.reason == "signal drain" && (h.node != b || h.weight != 0) {
			t.Errorf("drain row %+v", h)
		}
	}
	perNode := assertRoutedByHistory(t, s, history)

	// The hosts themselves moved, read from Postgres alone (which node
	// fetched each host's pages, in the leases before and after each
	// change), so this holds whatever the ring library computes.
	var reweightAt, drainAt int64
	for _, h := range history {
		switch h.reason {
		case "signal reweight":
			reweightAt = h.afterLease
		case "signal drain":
			drainAt = h.afterLease
		}
	}
	before := hostOwners(t, s, 0, reweightAt)
	between := hostOwners(t, s, reweightAt, drainAt)
	after := hostOwners(t, s, drainAt, math.MaxInt64)
	// c's weight went down: some of c's hosts went to a or b, and nothing
	// else moved.
	fromC := assertMoves(t, "reweight of "+c, before, between, c)
	// b was drained: b fetched nothing after, its hosts went to a or c,
	// and nothing else moved.
	fromB := assertMoves(t, "drain of "+b, between, after, b)
	for host, node := range after {
		if node == b {
			t.Errorf("host %s fetched by the drained %s from leases after the drain", host, b)
		}
	}
	if len(fromC) == 0 || len(fromB) == 0 {
		t.Fatalf("hosts moved off %s on its reweight: %v; off %s on its drain: %v; want some each", c, fromC, b, fromB)
	}
	harness.RecordHistory(t, s.Client, id, "reweight_and_drain")
	t.Logf("pages per node %v; %d history rows: %v", perNode, len(history), reasons)
	t.Logf("hosts fetched before/between/after the changes: %d/%d/%d; moved off %s on the reweight: %v; off %s on the drain: %v",
		len(before), len(between), len(after), c, fromC, b, fromB)
	_ = a
}

// hostOwners maps each host to the node that fetched its pages leased in
// (after, upTo]. A host fetched by two nodes in one such span fails the
// test: routing is by lease, so one ring, one owner.
func hostOwners(t *testing.T, s *harness.Stack, after, upTo int64) map[string]string {
	t.Helper()
	rows, err := s.Store.Pool().Query(bg, `SELECT f.shard_key, p.node FROM pages p JOIN frontier f ON f.id = p.url_id
		WHERE f.lease_id > $1 AND f.lease_id <= $2 GROUP BY 1, 2 ORDER BY 1, 2`, after, upTo)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	owners := map[string]string{}
	for rows.Next() {
		var host, node string
		if err := rows.Scan(&host, &node); err != nil {
			t.Fatal(err)
		}
		if prev, ok := owners[host]; ok {
			t.Errorf("host %s fetched by both %s and %s from leases %d..%d", host, prev, node, after+1, upTo)
		}
		owners[host] = node
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("owners of hosts: %v", err)
	}
	return owners
}

// assertMoves compares hosts' owners across a change to node: a host may
// move only off node, never onto it nor between two other nodes. It
// returns the hosts that moved off node ("host: old -> new").
func assertMoves(t *testing.T, change string, before, after map[string]string, node string) []string {
	t.Helper()
	var moved []string
	for host, was := range before {
		now, ok := after[host]
		switch {
		case !ok || now == was:
		case was == node:
			moved = append(moved, host+": "+was+" -> "+now)
		default:
			t.Errorf("%s moved host %s from %s to %s; only %s's hosts should move", change, host, was, now, node)
		}
	}
	slices.Sort(moved)
	return moved
}
