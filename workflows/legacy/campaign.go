// Package legacy is the campaign dispatcher as released in v0.1.0, kept
// unchanged so that campaigns whose runs started under it replay and carry
// on after an upgrade. Such a run stops leasing at its next workflow task,
// lets its batches finish and continues as new under the current
// dispatcher (package workflows); see retireChange. Do not change what it
// decides: replay of v0.1.0 histories (workflows/testdata/v0.1.0) guards
// it.
//
// Workflow code here is deterministic: no I/O, clock, randomness or map
// iteration order; every side effect is an activity in package activities.
package legacy

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/ring"
)

// retireChange marks where a v0.1.0 run, carried on by a newer worker,
// decides to hand over: it continues as new (draining its batches first,
// as v0.1.0 always did) and the new run takes the current dispatcher.
const retireChange = "retire-v0.1-dispatcher"

// CrawlCampaign is the v0.1.0 workflow: it crawls spec to completion and
// returns the summary from Postgres. carry is nil on a fresh start and set
// by continue-as-new; the campaign ID is the workflow ID.
func CrawlCampaign(ctx workflow.Context, spec campaign.Spec, carry *campaign.Carry) (campaign.Summary, error) {
	d, err := newDispatcher(ctx, spec, carry)
	if err != nil {
		return campaign.Summary{}, err
	}
	sum, err := d.loop()
	var (
		canErr      *workflow.ContinueAsNewError
		canceledErr *temporal.CanceledError
	)
	if err != nil && !errors.As(err, &canErr) && !errors.As(err, &canceledErr) {
		d.progress(ctx, campaign.StatusFailed, d.counters.Fetched, d.counters.Failed, true)
	}
	return sum, err
}

// Reasons recorded in node_weight_history.
const (
	reasonJoined    = "joined"
	reasonRejoined  = "rejoined"
	reasonDied      = "heartbeat expired"
	reasonLeft      = "left the registry"
	reasonRegistry  = "registered weight changed"
	reasonSuspect   = "batch timed out"
	reasonRecovered = "alive again"
	reasonSignal    = "signal "
	reasonDrainDone = "drain complete"
)

// ExcludedAtLimit is the reason recorded on URLs left pending when
// limits.max_pages ends a campaign.
const ExcludedAtLimit = "limits.max_pages reached"

type dispatcher struct {
	ctx  workflow.Context
	log  log.Logger
	id   string
	spec campaign.Spec
	key  int64
	run  int

	nodes map[string]*node // look-ups only; iterate d.order
	order []string         // node IDs, sorted
	ring  *ring.Ring

	counters campaign.Counters
	paused   bool
	rejected []string
	changes  []campaign.RingChange

	sel       workflow.Selector
	wake      workflow.Channel
	inflight  int // batches
	inflightN int // URLs in those batches
	batchSeq  int64

	leasing       bool
	leaseDry      bool  // the last lease found nothing due
	completions   int64 // batch completions, to tell whether a lease is stale
	leaseStartSeq int64
	lastLease     campaign.Lease
	// dispatchedLease is the newest lease routed so far.
	dispatchedLease int64
	budgetDone      bool
	timerSet        bool
	ops             int // retry waits, releases and ring-change writes outstanding
	cancelled       bool
	state           string

	attrs []string  // search attributes the namespace has (see progress)
	pub   published // what they last said

	retiring bool // handing over to the current dispatcher (retireChange)
}

type batch struct {
	seq     int64
	node    string
	leaseID int64
	groups  []campaign.LeaseGroup
	size    int
	route   int
	attempt int
}

// v01BatchSize is v0.1.0's default dispatch.batch_size.
const v01BatchSize = 200

func newDispatcher(ctx workflow.Context, spec campaign.Spec, carry *campaign.Carry) (*dispatcher, error) {
	info := workflow.GetInfo(ctx)
	d := &dispatcher{
		ctx: ctx, id: info.WorkflowExecution.ID,
		nodes: map[string]*node{}, ring: ring.New(), state: "starting",
	}
	// v0.1.0 filled its defaults here, in workflow code: a default changed
	// since (batch_size) would change what a run in flight does on replay,
	// so its own are pinned.
	if spec.Dispatch.BatchSize == 0 {
		spec.Dispatch.BatchSize = v01BatchSize
	}
	normalized, err := spec.Normalize()
	if err != nil {
		return nil, temporal.NewNonRetryableApplicationError("invalid campaign spec: "+err.Error(), "InvalidSpec", nil)
	}
	d.spec = normalized
	if carry != nil {
		d.key, d.run, d.counters, d.paused, d.rejected = carry.CampaignKey, carry.Run+1, carry.Counters, carry.Paused, carry.Rejected
		d.dispatchedLease = carry.DispatchedLease
		d.attrs = carry.SearchAttributes
		for _, c := range carry.Nodes {
			d.addNode(&node{
				id: c.ID, weight: c.Weight, override: c.Override, drain: c.Drain, health: c.Health,
				incarnation: c.Incarnation, suspectFor: c.SuspectFor, batchesSent: c.BatchesSent,
				fetched: c.Fetched, failed: c.Failed,
				adaptive: c.Adaptive, latencyMs: c.LatencyMs, errorRate: c.ErrorRate, samples: c.Samples,
			})
		}
	} else {
		d.run = 1
	}
	d.log = log.With(workflow.GetLogger(ctx), "campaign", d.id)
	d.sel = workflow.NewSelector(ctx)
	d.wake = workflow.NewBufferedChannel(ctx, 64)
	if err := d.registerHandlers(); err != nil {
		return nil, err
	}
	return d, nil
}

func (d *dispatcher) loop() (campaign.Summary, error) {
	ctx := d.ctx
	if d.key == 0 {
		var start campaign.StartResult
		actx := workflow.WithActivityOptions(ctx, d.controlOptions())
		if err := workflow.ExecuteActivity(actx, campaign.StartCampaignActivity,
			campaign.StartRequest{CampaignID: d.id, Spec: d.spec}).Get(ctx, &start); err != nil {
			return campaign.Summary{}, fmt.Errorf("start campaign %s: %w", d.id, err)
		}
		d.key = start.CampaignKey
		d.attrs = start.SearchAttributes
		d.counters.Seeds = int64(start.SeedsInserted)
	}
	d.refreshMembership()
	d.scheduleMembershipTimer()
	d.sel.AddReceive(d.wake, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil) })
	// Cancellation wakes the loop once; selecting on ctx.Done() itself
	// would fire on every later Select while the batches wind down.
	watchCtx, _ := workflow.NewDisconnectedContext(ctx)
	workflow.Go(watchCtx, func(wctx workflow.Context) {
		ctx.Done().Receive(wctx, nil)
		d.cancelled = true
		d.wake.SendAsync(nil)
	})

	for {
		d.flushChanges()
		if d.cancelled {
			return d.finishCancelled()
		}
		if d.finished() {
			return d.finish()
		}
		if !d.retiring {
			d.retiring = workflow.GetVersion(ctx, retireChange, workflow.DefaultVersion, 1) == 1
		}
		if d.retiring || d.continueAsNewDue() {
			d.state = "draining for continue-as-new"
			if d.quiet() && workflow.AllHandlersFinished(ctx) {
				return campaign.Summary{}, d.continueAsNew()
			}
		} else {
			d.maybeLease()
		}
		d.maybeWaitTimer()
		d.progress(ctx, d.campaignStatus(), d.counters.Fetched, d.counters.Failed, false)
		d.sel.Select(ctx)
	}
}

// finished: nothing pending, leased or in flight, or the page budget is
// spent and the last batches are in.
func (d *dispatcher) finished() bool {
	if !d.quiet() {
		return false
	}
	if d.budgetDone {
		return true
	}
	return d.leaseDry && d.lastLease.Pending == 0 && d.lastLease.LeasedElsewhere == 0
}

// quiet: safe to continue as new (no activity or lease outstanding).
func (d *dispatcher) quiet() bool {
	return d.inflight == 0 && !d.leasing && d.ops == 0
}

func (d *dispatcher) continueAsNewDue() bool {
	info := workflow.GetInfo(d.ctx)
	// Leave room for the completions of what is in flight.
	margin := max(300, 8*d.spec.Dispatch.WindowPerNode*len(d.order))
	return info.GetContinueAsNewSuggested() || info.GetCurrentHistoryLength() > d.spec.Dispatch.MaxHistoryEvents-margin
}

func (d *dispatcher) continueAsNew() error {
	d.drainSignals()
	carry := &campaign.Carry{
		CampaignKey: d.key, Run: d.run, Counters: d.counters, Paused: d.paused, Rejected: d.rejected,
		DispatchedLease: d.dispatchedLease, SearchAttributes: d.attrs,
	}
	for _, id := range d.order {
		n := d.nodes[id]
		carry.Nodes = append(carry.Nodes, campaign.CarriedNode{
			ID: n.id, Weight: n.weight, Override: n.override, Drain: n.drain, Health: n.health,
			Incarnation: n.incarnation, SuspectFor: n.suspectFor, BatchesSent: n.batchesSent,
			Fetched: n.fetched, Failed: n.failed,
			Adaptive: n.adaptive, LatencyMs: n.latencyMs, ErrorRate: n.errorRate, Samples: n.samples,
		})
	}
	d.log.Info("continuing as new", "run", d.run, "history_events", workflow.GetInfo(d.ctx).GetCurrentHistoryLength())
	return workflow.NewContinueAsNewError(d.ctx, campaign.WorkflowType, d.spec, carry)
}

func (d *dispatcher) finish() (campaign.Summary, error) {
	d.drainSignals() // applied, or rejected into status, not dropped unseen
	d.state = "finishing"
	req := campaign.FinishRequest{CampaignKey: d.key, Outcome: campaign.OutcomeCompleted, Runs: d.run}
	if d.budgetDone {
		req.ExcludeRest = ExcludedAtLimit
	}
	var sum campaign.Summary
	actx := workflow.WithActivityOptions(d.ctx, d.controlOptions())
	if err := workflow.ExecuteActivity(actx, campaign.FinishCampaignActivity, req).Get(d.ctx, &sum); err != nil {
		return sum, fmt.Errorf("finish campaign %s: %w", d.id, err)
	}
	d.state = "completed"
	d.progress(d.ctx, campaign.StatusCompleted, sum.Fetched, sum.Failed, true)
	return sum, nil
}

// finishCancelled waits for in-flight batches to hand their URLs back, then
// records the outcome.
func (d *dispatcher) finishCancelled() (campaign.Summary, error) {
	d.state = "cancelling"
	ctx, _ := workflow.NewDisconnectedContext(d.ctx)
	for !d.quiet() {
		d.sel.Select(ctx) // batches answer the cancellation with what they did
	}
	var sum campaign.Summary
	actx := workflow.WithActivityOptions(ctx, d.controlOptions())
	err := workflow.ExecuteActivity(actx, campaign.FinishCampaignActivity,
		campaign.FinishRequest{CampaignKey: d.key, Outcome: campaign.OutcomeCancelled, Runs: d.run}).Get(ctx, &sum)
	if err != nil {
		d.log.Warn("recording cancellation failed", "error", err)
	}
	d.state = "cancelled"
	d.progress(ctx, campaign.StatusCancelled, d.counters.Fetched, d.counters.Failed, true)
	return sum, temporal.NewCanceledError("campaign cancelled")
}

// capacity is how many more URLs the window has room for.
func (d *dispatcher) capacity() int {
	active := 0
	for _, id := range d.order {
		if d.nodes[id].effectiveWeight() > 0 {
			active++
		}
	}
	return active*d.spec.Dispatch.WindowPerNode*d.spec.Dispatch.BatchSize - d.inflightN
}

func (d *dispatcher) maybeLease() {
	switch {
	case d.leasing || d.budgetDone:
		return
	case d.paused:
		d.state = "paused"
		return
	case d.leaseDry:
		if d.inflight == 0 {
			d.state = "waiting for due URLs"
		}
		return
	}
	room := d.capacity()
	if room <= 0 || (d.inflight > 0 && room < d.spec.Dispatch.BatchSize/2) {
		if len(d.ring.Nodes()) == 0 || d.activeCount() == 0 {
			d.state = "waiting for nodes"
		}
		return
	}
	d.state = "running"
	d.leasing = true
	d.leaseStartSeq = d.completions
	req := campaign.LeaseRequest{
		CampaignKey: d.key, Limit: min(room, 10_000), PerHost: d.perHost(),
		TTL: d.spec.Dispatch.LeaseTTL, MaxPages: d.spec.Limits.MaxPages,
	}
	f := workflow.ExecuteLocalActivity(d.localOptions(), campaign.LeaseBatchActivity, req)
	d.sel.AddFuture(f, func(f workflow.Future) {
		d.leasing = false
		var lease campaign.Lease
		if err := f.Get(d.ctx, &lease); err != nil {
			d.log.Warn("lease failed", "error", err)
			d.leaseDry, d.lastLease = true, campaign.Lease{Pending: 1, NextDue: campaign.Duration(5 * time.Second)}
			return
		}
		d.lastLease = lease
		d.budgetDone = lease.BudgetExhausted && lease.Size() == 0
		if lease.Size() == 0 {
			// Stale if a batch finished meanwhile: it may have added links.
			d.leaseDry = d.completions == d.leaseStartSeq
			return
		}
		d.counters.Leased += int64(lease.Size())
		d.dispatchedLease = lease.LeaseID
		d.dispatch(lease.LeaseID, lease.Groups, 0)
	})
}

func (d *dispatcher) activeCount() int {
	n := 0
	for _, id := range d.order {
		if d.nodes[id].effectiveWeight() > 0 {
			n++
		}
	}
	return n
}

// perHost caps one host's URLs in a lease: enough to keep its concurrency
// busy until the next lease, few enough to stay fair across hosts. A host
// with a delay gets what it can fetch in about ten seconds.
func (d *dispatcher) perHost() int {
	p := d.spec.Politeness
	if delay := p.MinDelay.D(); delay > 0 {
		return max(1, min(d.spec.Dispatch.BatchSize, int(10*time.Second/delay)*p.MaxConcurrencyPerHost))
	}
	return min(d.spec.Dispatch.BatchSize, max(16, 8*p.MaxConcurrencyPerHost))
}

// dispatch routes leased groups by the ring and schedules one batch per
// node (split at batch_size).
func (d *dispatcher) dispatch(leaseID int64, groups []campaign.LeaseGroup, route int) {
	byNode := map[string][]campaign.LeaseGroup{}
	var unrouted []int64
	for _, g := range groups {
		owner, ok := d.route(g.ShardKey)
		if !ok {
			unrouted = append(unrouted, g.IDs...)
			continue
		}
		byNode[owner] = append(byNode[owner], g)
	}
	for _, id := range d.order { // map read in sorted order: deterministic
		gs := byNode[id]
		var cur []campaign.LeaseGroup
		size := 0
		for _, g := range gs {
			ids := g.IDs
			for len(ids) > 0 {
				take := min(len(ids), d.spec.Dispatch.BatchSize-size)
				cur = append(cur, campaign.LeaseGroup{ShardKey: g.ShardKey, IDs: ids[:take]})
				size += take
				ids = ids[take:]
				if size == d.spec.Dispatch.BatchSize {
					d.schedule(&batch{node: id, leaseID: leaseID, groups: cur, size: size, route: route})
					cur, size = nil, 0
				}
			}
		}
		if size > 0 {
			d.schedule(&batch{node: id, leaseID: leaseID, groups: cur, size: size, route: route})
		}
	}
	if len(unrouted) > 0 {
		d.release(leaseID, unrouted, "no node to route to")
	}
}

// route picks the node for a shard key: its ring owner, or, when every
// node is out of the ring, a suspect one still alive rather than none.
func (d *dispatcher) route(key string) (string, bool) {
	if owner, ok := d.ring.Lookup(key); ok {
		return owner, true
	}
	fallback := ring.New()
	for _, id := range d.order {
		if n := d.nodes[id]; n.health == suspect && !n.drain {
			fallback.Set(id, 1)
		}
	}
	return fallback.Lookup(key)
}

func (d *dispatcher) schedule(b *batch) {
	d.batchSeq++
	b.seq = d.batchSeq
	n := d.nodes[b.node]
	n.inflight++
	n.inflightN += b.size
	n.batchesSent++
	d.inflight++
	d.inflightN += b.size
	d.counters.Batches++
	var ids []int64
	for _, g := range b.groups {
		ids = append(ids, g.IDs...)
	}
	disp := d.spec.Dispatch
	actx := workflow.WithActivityOptions(d.ctx, workflow.ActivityOptions{
		TaskQueue:              campaign.NodeQueue(b.node),
		ScheduleToStartTimeout: disp.ScheduleToStartTimeout.D(),
		StartToCloseTimeout:    time.Hour,
		HeartbeatTimeout:       disp.HeartbeatTimeout.D(),
		WaitForCancellation:    true,
		Summary:                fmt.Sprintf("fetch %d URLs on %s", b.size, b.node),
		// Retries are the workflow's: a timeout means the node is suspect
		// and the batch moves on at once instead of waiting in the dead
		// node's queue; other failures retry here with backoff.
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1},
	})
	req := campaign.FetchBatchRequest{
		CampaignID: d.id, CampaignKey: d.key, LeaseID: b.leaseID, Node: b.node, IDs: ids, Route: b.route, Attempt: b.attempt,
	}
	f := workflow.ExecuteActivity(actx, campaign.FetchBatchActivity, req)
	d.sel.AddFuture(f, func(f workflow.Future) { d.batchDone(b, f) })
}

const (
	maxBatchAttempts = 6
	maxRoutes        = 8
)

func (d *dispatcher) batchDone(b *batch, f workflow.Future) {
	n := d.nodes[b.node]
	// A draining node's last batch in makes it drained: a recorded change.
	d.mutate(n, reasonDrainDone, func() {
		n.inflight--
		n.inflightN -= b.size
	})
	d.inflight--
	d.inflightN -= b.size
	d.completions++
	d.leaseDry = false

	var res campaign.BatchResult
	err := f.Get(d.ctx, &res)
	if d.cancelled {
		// Winding down: count what was done; what is left stays leased
		// until its lease expires, for a restart of the campaign.
		var p campaign.BatchResult
		var canceledErr *temporal.CanceledError
		if err == nil {
			d.account(n, res)
		} else if errors.As(err, &canceledErr) && canceledErr.HasDetails() && canceledErr.Details(&p) == nil {
			d.account(n, p)
		}
		return
	}
	var (
		timeoutErr  *temporal.TimeoutError
		appErr      *temporal.ApplicationError
		canceledErr *temporal.CanceledError
	)
	switch {
	case err == nil:
		d.account(n, res)
	case errors.As(err, &timeoutErr):
		if timeoutErr.HasLastHeartbeatDetails() {
			var p campaign.BatchResult
			if timeoutErr.LastHeartbeatDetails(&p) == nil {
				d.account(n, p)
			}
		}
		d.log.Warn("batch timed out; rerouting", "node", b.node, "timeout", timeoutErr.TimeoutType().String(), "urls", b.size)
		d.markSuspect(n)
		d.reroute(b)
	case errors.As(err, &canceledErr):
		var p campaign.BatchResult
		if canceledErr.HasDetails() && canceledErr.Details(&p) == nil {
			d.account(n, p)
		}
	case errors.As(err, &appErr):
		var p campaign.BatchResult
		if appErr.HasDetails() && appErr.Details(&p) == nil {
			d.account(n, p)
		}
		d.retry(b, err)
	default:
		d.retry(b, err)
	}
}

func (d *dispatcher) account(n *node, r campaign.BatchResult) {
	d.counters.Fetched += int64(r.Fetched)
	d.counters.Failed += int64(r.Failed)
	d.counters.Retried += int64(r.Retried)
	d.counters.Excluded += int64(r.Excluded)
	d.counters.Discovered += int64(r.Discovered)
	d.counters.Bytes += r.Bytes
	n.fetched += int64(r.Fetched)
	n.failed += int64(r.Failed)
	n.observe(r)
}

// reroute sends a batch whose node timed out to the shard keys' new owners.
// The new batch claims only what the old one left unsettled.
func (d *dispatcher) reroute(b *batch) {
	if b.route+1 >= maxRoutes {
		d.release(b.leaseID, flatten(b.groups), "rerouted too often")
		return
	}
	d.counters.Rerouted++
	d.dispatch(b.leaseID, b.groups, b.route+1)
}

// retry runs a failed batch again on its node after a backoff, or hands it
// on if the node left the ring meanwhile.
func (d *dispatcher) retry(b *batch, err error) {
	if b.attempt+1 >= maxBatchAttempts {
		d.log.Warn("batch failed too often; URLs go back to pending", "node", b.node, "error", err)
		d.release(b.leaseID, flatten(b.groups), "batch failed")
		return
	}
	d.log.Warn("batch failed; retrying", "node", b.node, "attempt", b.attempt+1, "error", err)
	wait := time.Second << b.attempt
	d.ops++ // the campaign is not done while its URLs wait here
	d.sel.AddFuture(workflow.NewTimer(d.ctx, wait), func(workflow.Future) {
		d.ops--
		if d.cancelled {
			return
		}
		next := &batch{node: b.node, leaseID: b.leaseID, groups: b.groups, size: b.size, route: b.route, attempt: b.attempt + 1}
		if d.nodes[b.node].effectiveWeight() > 0 {
			d.schedule(next)
			return
		}
		d.dispatch(b.leaseID, b.groups, b.route+1)
	})
}

// release returns leased URLs to pending through a local activity.
func (d *dispatcher) release(leaseID int64, ids []int64, why string) {
	d.log.Warn("releasing leased URLs", "urls", len(ids), "reason", why)
	d.ops++
	f := workflow.ExecuteLocalActivity(d.localOptions(), campaign.ReleaseBatchActivity,
		campaign.ReleaseRequest{CampaignKey: d.key, LeaseID: leaseID, IDs: ids})
	d.sel.AddFuture(f, func(f workflow.Future) {
		d.ops--
		d.leaseDry = false
		if err := f.Get(d.ctx, nil); err != nil {
			d.log.Warn("release failed; the lease will expire instead", "error", err)
		}
	})
}

func flatten(groups []campaign.LeaseGroup) []int64 {
	var ids []int64
	for _, g := range groups {
		ids = append(ids, g.IDs...)
	}
	return ids
}

// maybeWaitTimer sleeps until something is due when there is nothing to do
// but wait: URLs in retry backoff or host cooldown, or leases to expire.
func (d *dispatcher) maybeWaitTimer() {
	if d.timerSet || !d.leaseDry || d.inflight > 0 || d.leasing || d.paused {
		return
	}
	wait := min(max(d.lastLease.NextDue.D(), 100*time.Millisecond), 30*time.Second)
	d.timerSet = true
	d.sel.AddFuture(workflow.NewTimer(d.ctx, wait), func(workflow.Future) {
		d.timerSet = false
		d.leaseDry = false
	})
}

func (d *dispatcher) controlOptions() workflow.ActivityOptions {
	return workflow.ActivityOptions{
		StartToCloseTimeout: 5 * time.Minute,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second,
			NonRetryableErrorTypes: []string{"InvalidSpec"},
		},
	}
}

func (d *dispatcher) localOptions() workflow.Context {
	return workflow.WithLocalActivityOptions(d.ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: time.Minute,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 15 * time.Second,
		},
	})
}

// flushChanges writes pending ring changes to node_weight_history.
func (d *dispatcher) flushChanges() {
	if len(d.changes) == 0 {
		return
	}
	req := campaign.RecordRingChangesRequest{CampaignKey: d.key, Run: d.run, Changes: d.changes}
	d.changes = nil
	d.ops++
	f := workflow.ExecuteLocalActivity(d.localOptions(), campaign.RecordRingChangesActivity, req)
	d.sel.AddFuture(f, func(f workflow.Future) {
		d.ops--
		if err := f.Get(d.ctx, nil); err != nil {
			d.log.Warn("recording ring changes failed", "error", err)
		}
	})
}
