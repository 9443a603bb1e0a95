package workflows

import (
	"slices"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/spiderpool/spiderpool/campaign"
)

// A pool run (hostFlowChange version 2) routes each lease's batches into
// Postgres, where the nodes take them (store.TakeBatches), instead of
// scheduling a FetchBatch activity per batch. What the campaign's history
// pays for then depends on time, not on the pool or the pages:
//
//   - a lease every leasePace at most while hosts have work (a marker and
//     the workflow task it ends), however many nodes it routes to;
//   - a look at the figures every progressEvery (CampaignProgress: the
//     totals, and at most progressLimit nodes' figures that changed);
//   - a membership refresh every dispatch.membership_refresh, whose answer
//     lists only the nodes that changed.
//
// A node's liveness comes from the registry alone, read by every lease as
// well (a node that died is out of the next lease's ring), and what a dead
// node held goes back to pending with its holder token.
const (
	// progressEvery spaces the looks at a pool run's figures.
	progressEvery = 2 * time.Second
	// progressLimit bounds the nodes one look lists: their figures reach
	// the status in turn, and a look's marker stays small whatever the
	// pool.
	progressLimit = 32
	// poolRecheck bounds the wait after a lease found nothing due while
	// batches are out: nothing else tells the run that they ended (and
	// brought links, or freed their hosts).
	poolRecheck = leasePace
	// detailNodes bounds the nodes the Web UI's details list by name.
	detailNodes = 24
)

// poolMembers lists the ring's members for a pool lease: active nodes with
// their weights; the lease counts each one's room.
func (d *dispatcher) poolMembers() []campaign.LeaseNode {
	var nodes []campaign.LeaseNode
	for _, id := range d.order {
		if w := d.nodes[id].effectiveWeight(); w > 0 {
			nodes = append(nodes, campaign.LeaseNode{ID: id, Weight: w})
		}
	}
	return nodes
}

// routed takes a pool lease's answer: the batches are in Postgres for the
// nodes. Those routed to nodes that left the ring while the lease ran (a
// drain, a death) go back, unless the node took them already.
func (d *dispatcher) routed(lease campaign.HostLease) {
	d.counters.Leased += int64(lease.Routed.URLs)
	d.counters.Batches += int64(lease.Routed.Batches)
	d.dispatchedLease = lease.LeaseID
	left := d.leftDuringLease
	d.leftDuringLease = nil
	if len(left) > 0 {
		d.releaseNodeBatches(left, lease.LeaseID, "nodes that left the ring while the lease ran")
	}
}

// releaseNodeBatches hands back what nodes were routed and have not taken
// (of one lease, or all), and what their dead holders claimed. A failure
// is only logged: the leases expire instead, and a dead holder's batches
// go at the next lease.
func (d *dispatcher) releaseNodeBatches(nodes []string, lease int64, why string) {
	d.ops++
	f := workflow.ExecuteLocalActivity(d.localOptions(), campaign.ReleaseNodeBatchesActivity,
		campaign.ReleaseNodeBatchesRequest{CampaignKey: d.key, Nodes: nodes, Lease: lease})
	d.sel.AddFuture(f, func(f workflow.Future) {
		d.ops--
		d.leaseDry = false
		var n int
		if err := f.Get(d.ctx, &n); err != nil {
			d.log.Warn("handing back nodes' batches failed; their leases expire instead", "why", why, "nodes", nodes, "error", err)
			return
		}
		if n > 0 {
			d.log.Info("handed back nodes' batches", "urls", n, "why", why, "nodes", nodes)
		}
	})
}

// scheduleProgress looks at the figures after progressEvery.
func (d *dispatcher) scheduleProgress() {
	d.sel.AddFuture(workflow.NewTimer(d.ctx, progressEvery), func(f workflow.Future) {
		if f.Get(d.ctx, nil) == nil {
			d.progressDue = true
		}
	})
}

// maybeReadProgress reads the figures when a look is due and none is out.
func (d *dispatcher) maybeReadProgress() {
	if !d.progressDue || d.readingProgress || d.holdingBack(callProgress) {
		return
	}
	d.progressDue = false
	d.readingProgress = true
	d.ops++
	f := workflow.ExecuteLocalActivity(d.localOptions(), campaign.CampaignProgressActivity, d.progressRequest(nil, progressLimit))
	d.sel.AddFuture(f, func(f workflow.Future) {
		d.ops--
		d.readingProgress = false
		var p campaign.Progress
		if err := f.Get(d.ctx, &p); err != nil {
			d.controlFailed(callProgress, err)
			d.progressDue = true // when its wait is over
			return
		}
		d.controlSucceeded(callProgress)
		d.applyProgress(p)
		d.scheduleProgress()
	})
}

// readProgressNow reads the figures of first (all nodes when limit is 0)
// in the caller's coroutine: an update answers with them, the end of the
// campaign settles on them.
func (d *dispatcher) readProgressNow(ctx workflow.Context, first []string, limit int) error {
	d.ops++
	defer func() { d.ops-- }()
	var p campaign.Progress
	err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, d.localActivityOptions()),
		campaign.CampaignProgressActivity, d.progressRequest(first, limit)).Get(ctx, &p)
	if err != nil {
		return err
	}
	d.applyProgress(p)
	return nil
}

func (d *dispatcher) progressRequest(first []string, limit int) campaign.ProgressRequest {
	req := campaign.ProgressRequest{CampaignKey: d.key, After: d.progressAfter, Limit: limit, First: first}
	for _, id := range d.order {
		n := d.nodes[id]
		draining := n.state() == campaign.NodeDraining
		if draining && !slices.Contains(first, id) {
			req.First = append(req.First, id)
		}
		if n.heard && !draining { // a draining node is listed whatever its figures: its state waits on them
			req.Known = append(req.Known, n.reported)
		}
	}
	return req
}

// applyProgress takes a look's figures: the counters move by what the
// totals moved since the last look, each listed node's figures by what
// its own did.
func (d *dispatcher) applyProgress(p campaign.Progress) {
	delta := p.Totals
	delta.Sub(d.poolTotals)
	d.poolTotals = p.Totals
	c := &d.counters
	c.Fetched += int64(delta.Fetched)
	c.Failed += int64(delta.Failed)
	c.Retried += int64(delta.Retried)
	c.Excluded += int64(delta.Excluded)
	c.Discovered += int64(delta.Discovered)
	c.Bytes += delta.Bytes
	if delta.Done() > 0 || delta.Discovered > 0 {
		d.completions++
		d.leaseDry = false // links may be due, hosts freed
		d.pagesMayHaveArrived()
	}
	if p.After != "" {
		d.progressAfter = p.After
	}
	for _, f := range p.Nodes {
		n, ok := d.nodes[f.ID]
		if !ok {
			continue // not a member (any more)
		}
		was := n.reported
		n.reported, n.heard = f, true
		n.batchesSent += f.BatchesSent - was.BatchesSent
		n.fetched += f.Fetched - was.Fetched
		n.failed += f.Failed - was.Failed
		n.observe(campaign.BatchResult{
			Requests:        int(f.Requests - was.Requests),
			RequestMillis:   f.RequestMillis - was.RequestMillis,
			TransportErrors: int(f.TransportErrors - was.TransportErrors),
		})
		// A draining node with nothing left is drained: a recorded change.
		d.mutate(n, reasonDrainDone, func() { n.inflight, n.inflightN = f.InflightBatches, f.InflightURLs })
	}
	if d.spec.Dispatch.AdaptiveWeights {
		d.adapt()
	}
}

// applyMembershipChanges takes a pool run's membership answer: only the
// nodes that differ from what the run knows, the nodes gone among them.
func (d *dispatcher) applyMembershipChanges(infos []campaign.NodeInfo) {
	for _, info := range infos {
		d.applyNodeInfo(info)
	}
	if d.spec.Dispatch.AdaptiveWeights {
		d.adapt()
	}
}

// known is what the run knows of the registry, for a membership refresh
// to answer with the differences only.
func (d *dispatcher) known() []campaign.NodeInfo {
	out := make([]campaign.NodeInfo, 0, len(d.order))
	for _, id := range d.order {
		n := d.nodes[id]
		out = append(out, campaign.NodeInfo{ID: id, Weight: n.weight, Alive: n.health != dead, Incarnation: n.incarnation})
	}
	return out
}
