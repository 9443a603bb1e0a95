package store_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/ring"
	"github.com/spiderpool/spiderpool/store"
	"github.com/spiderpool/spiderpool/tests/harness"
)

// TestPoolLeaseRoutesRenderHostsByCapability: a pool run's lease learns
// from the registry which live pulling nodes have a browser. A render
// host's URLs go only to one of them, by the ring of those nodes; plain
// hosts go to their owners on the ring of all. With no browser node left
// the render host waits: its URLs stay pending, the lease counts it and
// says to look again later, RenderWaiting counts its URLs, and a browser
// node that joins gets it at the next lease.
func TestPoolLeaseRoutesRenderHostsByCapability(t *testing.T) {
	s := harness.OpenStore(t)
	render := &campaign.Render{Hosts: []string{"spa.test"}}
	spec, err := campaign.Spec{Seeds: []string{"http://spa.test/"}, Render: render}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	key, _, err := s.CreateCampaign(ctx, t.Name(), spec)
	if err != nil {
		t.Fatal(err)
	}
	var raw []string
	for i := range 10 {
		raw = append(raw, fmt.Sprintf("http://spa.test/%d", i))
	}
	for h := range 20 {
		raw = append(raw, fmt.Sprintf("http://p%d.test/0", h), fmt.Sprintf("http://p%d.test/1", h))
	}
	if _, err := s.InsertURLs(ctx, key, urls(t, raw...)); err != nil {
		t.Fatal(err)
	}
	pull, browser := []string{campaign.CapPull}, []string{campaign.CapPull, campaign.CapBrowser}
	register := func(id string, caps []string) {
		reg := store.Registration{ID: id, Weight: 1, Incarnation: "1", TTL: time.Minute, Capabilities: caps}
		if err := s.RegisterNode(ctx, reg); err != nil {
			t.Fatal(err)
		}
	}
	register("plain1", pull)
	register("plain2", pull)
	register("browser1", browser)
	members := []campaign.LeaseNode{{ID: "plain1", Weight: 1}, {ID: "plain2", Weight: 1}, {ID: "browser1", Weight: 1}, {ID: "browser2", Weight: 1}}
	p := store.HostLeaseParams{
		CampaignKey: key, Nodes: members, BatchSize: 100, Horizon: time.Hour, TTL: time.Minute,
		Assign: &campaign.Assign{CampaignID: t.Name(), Window: 10}, Render: render.RendersHost,
	}
	all := ring.New(ring.Node{ID: "plain1", Weight: 1}, ring.Node{ID: "plain2", Weight: 1}, ring.Node{ID: "browser1", Weight: 1})

	l := leaseHosts(t, s, p)
	routed := routedByHost(t, s, key)
	if l.RenderWaiting != 0 || len(routed["spa.test"]) != 1 || routed["spa.test"]["browser1"] != 10 {
		t.Fatalf("render host routed %v, %d hosts waiting; want its 10 URLs on browser1, none waiting", routed["spa.test"], l.RenderWaiting)
	}
	for h := range 20 {
		host := fmt.Sprintf("p%d.test", h)
		owner, _ := all.Lookup(host)
		if routed[host][owner] != 2 {
			t.Errorf("plain host %s routed %v, want both URLs on its owner %s among all live nodes", host, routed[host], owner)
		}
	}
	if n, err := s.RenderWaiting(ctx, key, render, nil); err != nil || n != 0 {
		t.Fatalf("RenderWaiting with a browser node up: %d (%v), want 0", n, err)
	}

	// The browser node stops; what it was routed comes back: its plain
	// hosts move to their owners among the others, its render host waits.
	if err := s.DeregisterNode(ctx, "browser1", "1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReleaseNodeBatches(ctx, key, []string{"browser1"}, 0); err != nil {
		t.Fatal(err)
	}
	l = leaseHosts(t, s, p)
	routed = routedByHost(t, s, key)
	if len(routed["spa.test"]) != 0 || l.RenderWaiting != 1 {
		t.Fatalf("render host routed %v with no browser node, %d hosts waiting; want none routed, 1 waiting", routed["spa.test"], l.RenderWaiting)
	}
	for host, on := range routed {
		if on["browser1"] > 0 {
			t.Errorf("plain host %s still routed to the stopped browser1: %v", host, on)
		}
	}
	// Only the render host is due now: the lease says so, and to look
	// again later rather than at once; its URLs keep the campaign open.
	l = leaseHosts(t, s, p)
	if l.Routed.URLs != 0 || l.RenderWaiting != 1 || l.Pending != 10 || l.NextDue <= 0 {
		t.Fatalf("lease with only the render host due: routed %d, %d hosts waiting, %d pending, next due %v; want 0, 1, 10, later (not now)",
			l.Routed.URLs, l.RenderWaiting, l.Pending, l.NextDue.D())
	}
	if n, err := s.RenderWaiting(ctx, key, render, nil); err != nil || n != 10 {
		t.Fatalf("RenderWaiting with no browser node: %d (%v), want 10", n, err)
	}

	// Another browser node joins, outside the campaign's spec.nodes
	// first: it counts only for a campaign that may use it. At the next
	// lease the render host is its own.
	register("browser2", browser)
	if n, err := s.RenderWaiting(ctx, key, render, []string{"plain1", "plain2"}); err != nil || n != 10 {
		t.Fatalf("RenderWaiting of a campaign on plain1 and plain2 alone: %d (%v), want 10", n, err)
	}
	if n, err := s.RenderWaiting(ctx, key, render, nil); err != nil || n != 0 {
		t.Fatalf("RenderWaiting with browser2 up: %d (%v), want 0", n, err)
	}
	l = leaseHosts(t, s, p)
	if routed := routedByHost(t, s, key); l.RenderWaiting != 0 || routed["spa.test"]["browser2"] != 10 {
		t.Fatalf("render host routed %v, %d hosts waiting; want its 10 URLs on browser2", routed["spa.test"], l.RenderWaiting)
	}
}

// routedByHost counts the URLs queued in node_batches by host and node.
func routedByHost(t *testing.T, s *store.Store, key int64) map[string]map[string]int {
	t.Helper()
	rows, err := s.Pool().Query(ctx, `
		SELECT h.shard_key, b.node, count(*)::int
		FROM node_batches b CROSS JOIN LATERAL unnest(b.ids) AS u(id)
		JOIN frontier f ON f.id = u.id JOIN hosts h ON h.id = f.host_id
		WHERE b.campaign = $1
		GROUP BY 1, 2`, key)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]int{}
	var host, node string
	var n int
	if _, err := pgx.ForEachRow(rows, []any{&host, &node, &n}, func() error {
		if out[host] == nil {
			out[host] = map[string]int{}
		}
		out[host][node] += n
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}
