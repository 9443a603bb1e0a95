// Package workflows holds CrawlCampaign, the campaign dispatcher: it leases
// what each host can absorb from the frontier, routed by the ring to the
// nodes with room in their window, applies operator signals and updates,
// and continues as new before its history grows large, without waiting for
// the batches in flight.
//
// Flow control, in short: a host gets work for about Horizon at the rate
// its politeness allows, and more once half of it is done (store.LeaseHosts);
// a node has at most window_per_node batches of a campaign in flight,
// written to Postgres, where the node's puller takes them (pool runs); a
// node leaves the ring only when its registry heartbeat says so. See
// docs/pool.md and docs/architecture.md.
//
// Workflow code here is deterministic: no I/O, clock, randomness or map
// iteration order; every side effect is an activity in package activities.
// Which runs this code can carry on is in docs/upgrading.md: runs started
// by the previous release and this one.
package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/spiderpool/spiderpool/campaign"
)

// Register is what a worker registers: the workflow under its public name.
func Register(r interface {
	RegisterWorkflowWithOptions(any, workflow.RegisterOptions)
}) {
	r.RegisterWorkflowWithOptions(CrawlCampaign, workflow.RegisterOptions{Name: campaign.WorkflowType})
	r.RegisterWorkflowWithOptions(ProcessBatch, workflow.RegisterOptions{Name: campaign.ChunkedBatchWorkflowType})
}

// hostFlowChange versions the dispatcher. Version 2 (pool runs, see
// pool.go, since v0.11.0) routes batches into Postgres for the nodes to
// take. Earlier versions (v0.1.0 to v0.10.0: no marker, or version 1,
// which scheduled a FetchBatch activity per batch) are out of the support
// window (docs/upgrading.md): such a run's workflow task fails (see
// retired), and the run waits for a node of its own release.
const hostFlowChange = "host-aware-flow"

// poolRuns is hostFlowChange's version: the only one this code runs.
const poolRuns = 2

// Changes whose old branches are retired: every run this code carries on
// took their version 1. New runs still record them, so that a v0.11.0 node
// in a rolling upgrade, which reads them, can run this release's runs too.
const (
	controlRetryChange = "control-retry"
	boundedRunChange   = "bounded-run"
	staleRouteChange   = "stale-route"
)

// recordRetiredChanges records the markers of the retired changes, as
// v0.11.0 does, in its order. Retire with v0.11.0's window.
func recordRetiredChanges(ctx workflow.Context) {
	for _, change := range []string{controlRetryChange, boundedRunChange, staleRouteChange} {
		workflow.GetVersion(ctx, change, 1, 1)
	}
}

// retired is why a run started by a release older than the support window
// cannot go on here. It panics, so the workflow task fails and is retried
// (on a node of the run's release, if one polls) rather than failing the
// campaign: nothing is lost while the operator chooses.
func retired(change string, version workflow.Version) {
	panic(fmt.Sprintf("this campaign's run was started by a spiderpool release older than v0.11.0 "+
		"(%s version %d), which this release no longer runs: let it finish on nodes of its own release, "+
		"or terminate it and start it again under its ID (what it fetched is kept); see docs/upgrading.md", change, version))
}

// CrawlCampaign crawls spec to completion and returns the summary from
// Postgres. carry is nil on a fresh start and set by continue-as-new; the
// campaign ID is the workflow ID.
//
// It can be started with `temporal workflow start --type CrawlCampaign
// --task-queue spiderpool.control --input '{"seeds":["http://..."]}'`: the
// spec gets the same defaults as from the CLI.
func CrawlCampaign(ctx workflow.Context, spec campaign.Spec, carry *campaign.Carry) (campaign.Summary, error) {
	if v := workflow.GetVersion(ctx, hostFlowChange, workflow.DefaultVersion, poolRuns); v != poolRuns {
		retired(hostFlowChange, v)
	}
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
	reasonSignal    = "signal "
	reasonDrainDone = "drain complete"
)

// ExcludedAtLimit is the reason recorded on URLs left pending when
// limits.max_pages ends a campaign.
const ExcludedAtLimit = "limits.max_pages reached"

// Flow control constants.
const (
	// Horizon is how much work a host gets at a time, in time at its
	// allowed rate; it gets more once half of it is done.
	Horizon = 4 * time.Second
	// handBackAfter bounds a batch's life: what has not started by then
	// goes back to pending (its host was slower than leasing thought), so
	// a batch never holds a window slot long.
	handBackAfter = 2 * Horizon
	// leasePace is the least time between two leases while the last one
	// left nothing waiting for room: hosts come due continuously, and
	// gathering them keeps batches large and history short.
	leasePace = 500 * time.Millisecond
)

type dispatcher struct {
	ctx  workflow.Context
	log  log.Logger
	id   string
	spec campaign.Spec
	key  int64
	run  int

	nodes map[string]*node // look-ups only; iterate d.order
	order []string         // node IDs, sorted

	counters campaign.Counters
	paused   bool
	rejected []string
	changes  []campaign.RingChange

	sel  workflow.Selector
	wake workflow.Channel
	// orphans are batches a v0.10.0 run handed on, carried by a v0.11.0
	// run: their leases are released as the run starts (see
	// releaseOrphanedLeases).
	orphans []campaign.OrphanBatch

	leasing       bool
	lastLease     campaign.HostLease
	leasedAt      time.Time
	leaseDry      bool  // the last lease found nothing due
	completions   int64 // looks that found batches ended, to tell whether a lease is stale
	leaseStartSeq int64
	// dispatchedLease is the newest lease routed so far.
	dispatchedLease int64
	timerSet        bool
	ops             int // releases and ring-change writes outstanding
	cancelled       bool
	state           string

	// out is the state of failed control calls held back (see outage).
	out outage

	attrs []string  // search attributes the namespace has (see progress)
	pub   published // what they last said

	// procs are the campaign's processors (processorsChange);
	// frontierLeases counts the frontier leases that completed; leaseRun
	// names this run in processor leases (see campaign.LeaseRun).
	procs          []*processor
	frontierLeases int64
	leaseRun       int64
	// releaseFailedBatches: see processorsChange, version 9.
	releaseFailedBatches bool
	// countWakesProcessors: see processorsChange, version 10.
	countWakesProcessors bool
	// handOnSince: when continue-as-new began waiting for processor
	// batches (see processorsHandedOn).
	handOnSince time.Time

	// progressDue, readingProgress and progressAfter drive the looks at
	// the figures (see pool.go); poolTotals are the totals of the last
	// look; leftDuringLease are the nodes that left the ring while a lease
	// ran (their batches of it go back).
	progressDue     bool
	readingProgress bool
	progressAfter   string
	poolTotals      campaign.BatchResult
	leftDuringLease []string
}

// normalized is the spec with defaults filled in, or why it is invalid.
type normalized struct {
	Spec  campaign.Spec `json:"spec"`
	Error string        `json:"error,omitempty"`
}

// normalize fills the spec's defaults in a side effect: the result is in
// the history, so a default changed by a later release never changes what
// a run in flight does on replay.
func normalize(ctx workflow.Context, spec campaign.Spec) (campaign.Spec, error) {
	var n normalized
	err := workflow.SideEffect(ctx, func(workflow.Context) any {
		s, err := spec.Normalize()
		if err != nil {
			return normalized{Error: err.Error()}
		}
		return normalized{Spec: s}
	}).Get(&n)
	switch {
	case err != nil:
		return campaign.Spec{}, err
	case n.Error != "":
		return campaign.Spec{}, errors.New(n.Error)
	}
	return n.Spec, nil
}

func newDispatcher(ctx workflow.Context, spec campaign.Spec, carry *campaign.Carry) (*dispatcher, error) {
	info := workflow.GetInfo(ctx)
	d := &dispatcher{ctx: ctx, id: info.WorkflowExecution.ID, nodes: map[string]*node{}, state: "starting"}
	normalized, err := normalize(ctx, spec)
	if err != nil {
		return nil, temporal.NewNonRetryableApplicationError("invalid campaign spec: "+err.Error(), "InvalidSpec", nil)
	}
	d.spec = normalized
	recordRetiredChanges(ctx)
	d.run = 1
	var carriedProcs []campaign.ProcessorStatus
	if carry != nil {
		carriedProcs = carry.Processors
		d.key, d.run, d.counters, d.paused, d.rejected = carry.CampaignKey, carry.Run+1, carry.Counters, carry.Paused, carry.Rejected
		d.dispatchedLease, d.attrs, d.orphans = carry.DispatchedLease, carry.SearchAttributes, carry.Orphans
		d.changes = carry.Changes
		if carry.PoolTotals != nil {
			d.poolTotals = *carry.PoolTotals
		}
		for _, c := range carry.Nodes {
			d.addNode(nodeFromCarry(c))
		}
	}
	d.setUpProcessors(carriedProcs)
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
	d.releaseOrphanedLeases()
	d.scheduleProgress()
	d.refreshMembership()
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
		d.retryControl()
		d.flushChanges()
		if d.cancelled {
			return d.finishCancelled()
		}
		if d.finished() {
			if d.processorsDone() {
				return d.finish()
			}
			d.state = "waiting for processors"
		}
		if d.continueAsNewDue() {
			d.state = "continuing as new"
			if !d.leasing && d.ops == 0 && d.processorsHandedOn() && workflow.AllHandlersFinished(ctx) {
				return campaign.Summary{}, d.continueAsNew()
			}
		} else {
			d.maybeReadProgress()
			d.maybeLease()
			d.deliver()
		}
		d.maybeWaitTimer()
		d.progress(ctx, d.campaignStatus(), d.counters.Fetched, d.counters.Failed, false)
		d.sel.Select(ctx)
	}
}

// quiet: nothing in flight and nothing outstanding.
func (d *dispatcher) quiet() bool {
	return !d.leasing && d.ops == 0
}

// finished: nothing pending or leased anywhere (Postgres says so: batches
// this run gave up on, or a previous run's, may still be settling), or
// the page budget is spent and only URLs it would not admit are left.
func (d *dispatcher) finished() bool {
	l := d.lastLease
	return d.quiet() && len(d.changes) == 0 && d.leaseDry && l.LeasedElsewhere == 0 && (l.Pending == 0 || l.BudgetExhausted)
}

func (d *dispatcher) continueAsNewDue() bool {
	info := workflow.GetInfo(d.ctx)
	return info.GetContinueAsNewSuggested() || info.GetCurrentHistoryLength() > d.spec.Dispatch.MaxHistoryEvents-d.historyMargin()
}

// historyMargin is how far below max_history_events a run stops leasing.
// It does not grow with the nodes: a lease is one marker however many
// batches it routes, so the margin covers only the lease and the writes
// outstanding when it falls due.
func (d *dispatcher) historyMargin() int {
	return min(500, d.spec.Dispatch.MaxHistoryEvents/5)
}

// continueAsNew hands the campaign to a new run. Batches in flight go on:
// they are in Postgres, and the next run's looks at the figures count
// what they do.
func (d *dispatcher) continueAsNew() error {
	d.drainSignals()
	totals := d.poolTotals
	carry := &campaign.Carry{
		CampaignKey: d.key, Run: d.run, Counters: d.counters, Paused: d.paused, Rejected: d.rejected,
		DispatchedLease: d.dispatchedLease, SearchAttributes: d.attrs,
		// Ring changes not yet written (Postgres away): the next run
		// writes them.
		Changes:    d.changes,
		Processors: d.processorStatus(),
		PoolTotals: &totals,
	}
	for _, id := range d.order {
		n := d.nodes[id]
		if n.health == dead && n.inflight == 0 {
			continue // long gone: its history is in node_weight_history
		}
		carry.Nodes = append(carry.Nodes, n.carried())
	}
	d.log.Info("continuing as new", "run", d.run, "history_events", workflow.GetInfo(d.ctx).GetCurrentHistoryLength())
	return workflow.NewContinueAsNewError(d.ctx, campaign.WorkflowType, d.spec, carry)
}

// releaseOrphanedLeases returns to pending the URLs of batches a v0.10.0
// run handed on (carried by a v0.11.0 run that has not continued as new
// since): no node reports them to a pool run.
func (d *dispatcher) releaseOrphanedLeases() {
	var leases []int64
	for _, o := range d.orphans {
		if len(leases) == 0 || leases[len(leases)-1] != o.LeaseID {
			leases = append(leases, o.LeaseID)
		}
	}
	if len(leases) > 0 {
		d.releaseWith(campaign.ReleaseRequest{CampaignKey: d.key, Leases: leases}, "batches of the last run no node picked up")
	}
	d.orphans = nil
}

func (d *dispatcher) finish() (campaign.Summary, error) {
	d.drainSignals() // applied, or rejected into status, not dropped unseen
	d.state = "finishing"
	d.settleNodeFigures(d.ctx)
	req := campaign.FinishRequest{CampaignKey: d.key, Outcome: campaign.OutcomeCompleted, Runs: d.run}
	if d.lastLease.BudgetExhausted {
		req.ExcludeRest = ExcludedAtLimit
	}
	var sum campaign.Summary
	actx := workflow.WithActivityOptions(d.ctx, d.controlOptions())
	if err := workflow.ExecuteActivity(actx, campaign.FinishCampaignActivity, req).Get(d.ctx, &sum); err != nil {
		return sum, fmt.Errorf("finish campaign %s: %w", d.id, err)
	}
	d.state = "completed"
	d.settleCounters(sum)
	d.progress(d.ctx, campaign.StatusCompleted, sum.Fetched, sum.Failed, true)
	return sum, nil
}

// settleCounters takes the campaign's final figures from Postgres, the
// truth: the counters sum the looks at the nodes' figures, and a node that
// dies after a commit but before its figures are read leaves pages out.
// Status of a finished campaign then agrees with its summary.
func (d *dispatcher) settleCounters(sum campaign.Summary) {
	c := &d.counters
	c.Fetched, c.Failed, c.Excluded, c.Bytes = sum.Fetched, sum.Failed, sum.Excluded, sum.Bytes
	if sum.URLs >= c.Seeds {
		c.Discovered = sum.URLs - c.Seeds
	}
	for _, id := range d.order {
		if pages, ok := sum.PerNode[id]; ok {
			d.nodes[id].fetched = pages
		}
	}
}

// settleNodeFigures reads every node's figures of a pool run as it ends,
// so its last status is whole (a look lists only progressLimit nodes).
// Failing only leaves them as the last looks had them.
func (d *dispatcher) settleNodeFigures(ctx workflow.Context) {
	if err := d.readProgressNow(ctx, nil, 0); err != nil {
		d.log.Warn("reading the nodes' last figures failed", "error", err)
	}
}

// finishCancelled waits for the lease and writes under way, then records
// the outcome; the nodes stop the campaign's batches when they see it
// ended, and hand their URLs back.
func (d *dispatcher) finishCancelled() (campaign.Summary, error) {
	d.state = "cancelling"
	ctx, _ := workflow.NewDisconnectedContext(d.ctx)
	for !d.quiet() {
		d.sel.Select(ctx) // the lease and writes under way answer
	}
	d.settleNodeFigures(ctx)
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

func (d *dispatcher) maybeLease() {
	switch {
	case d.leasing:
		return
	case d.paused:
		d.state = "paused"
		return
	case d.holdingBack(callLease):
		d.state = "waiting for Postgres"
		return
	}
	if name := d.processorBacklog(); name != "" {
		d.state = "waiting for processor " + name
		return
	}
	nodes := d.poolMembers() // each node's room is counted by the lease
	switch {
	case len(nodes) == 0:
		d.state = "waiting for nodes"
		return
	case d.leaseDry:
		d.state = "waiting for due URLs"
		return
	case !d.lastLease.More && workflow.Now(d.ctx).Sub(d.leasedAt) < leasePace:
		return // maybeWaitTimer wakes the loop when the pace allows
	}
	d.state = "running"
	d.leasing = true
	d.leaseStartSeq = d.completions
	p := d.spec.Politeness
	req := campaign.LeaseHostsRequest{
		CampaignKey: d.key, Nodes: nodes, BatchSize: d.spec.Dispatch.BatchSize,
		Horizon: campaign.Duration(Horizon), TTL: d.spec.Dispatch.LeaseTTL, MaxPages: d.spec.Limits.MaxPages,
		MinDelay: p.MinDelay, Concurrency: p.MaxConcurrencyPerHost,
		Assign: &campaign.Assign{
			CampaignID: d.id, Window: d.spec.Dispatch.WindowPerNode,
			HandBackAfter: campaign.Duration(handBackAfter), BodyChunks: d.bodyChunks(),
		},
	}
	f := workflow.ExecuteLocalActivity(d.localOptions(), campaign.LeaseHostsActivity, req)
	d.sel.AddFuture(f, func(f workflow.Future) {
		d.leasing = false
		d.leasedAt = workflow.Now(d.ctx)
		var lease campaign.HostLease
		if err := f.Get(d.ctx, &lease); err != nil {
			next := d.controlFailed(callLease, err)
			d.leaseDry, d.lastLease = true, campaign.HostLease{Pending: 1, NextDue: campaign.Duration(next)}
			return
		}
		d.controlSucceeded(callLease)
		d.lastLease = lease
		d.frontierLeases++
		d.processorsWaiting(lease.ProcessorsWaiting)
		if lease.Routed.URLs == 0 {
			// Stale if batches ended meanwhile (a look at the figures
			// said so): they may have added links or freed hosts.
			d.leaseDry = d.completions == d.leaseStartSeq
			d.leftDuringLease = nil
			return
		}
		d.routed(lease)
	})
}

// maybeWaitTimer sleeps until leasing makes sense again, when nothing else
// would wake the loop first: URLs in retry backoff, hosts under their
// quota or paused, leases to expire, or the lease pace.
func (d *dispatcher) maybeWaitTimer() {
	if d.timerSet || d.leasing || d.paused || d.holdingBack(callLease) || d.continueAsNewDue() {
		return // holding back, retryControl's timer wakes the loop
	}
	var wait time.Duration
	switch since := workflow.Now(d.ctx).Sub(d.leasedAt); {
	case d.leaseDry && d.lastLease.LeasedElsewhere > 0:
		// Batches are out, and only Postgres knows when they end.
		wait = min(max(d.lastLease.NextDue.D(), leasePace), poolRecheck)
	case d.leaseDry:
		wait = min(max(d.lastLease.NextDue.D(), leasePace), 30*time.Second)
	case !d.lastLease.More && since < leasePace:
		wait = leasePace - since
	default:
		return
	}
	d.timerSet = true
	d.sel.AddFuture(workflow.NewTimer(d.ctx, wait), func(workflow.Future) {
		d.timerSet = false
		d.leaseDry = false
	})
}

func (d *dispatcher) releaseWith(req campaign.ReleaseRequest, why string) {
	if d.holdingBack(callRelease) {
		d.out.releases = append(d.out.releases, req)
		return
	}
	d.ops++
	d.out.releasing++
	f := workflow.ExecuteLocalActivity(d.localOptions(), campaign.ReleaseBatchActivity, req)
	d.sel.AddFuture(f, func(f workflow.Future) {
		d.ops--
		d.out.releasing--
		d.leaseDry = false
		var n int
		if err := f.Get(d.ctx, &n); err != nil {
			// Tried again with the other calls; if the run continues as
			// new first, the lease expires instead.
			d.controlFailed(callRelease, err)
			d.out.releases = append(d.out.releases, req)
			return
		}
		d.controlSucceeded(callRelease)
		if n > 0 {
			d.log.Info("released leased URLs", "urls", n, "why", why)
		}
	})
}

func (d *dispatcher) controlOptions() workflow.ActivityOptions {
	return controlActivityOptions()
}

// controlActivityOptions run a control activity on the workflow's own
// task queue, retried until it succeeds or the spec is found invalid.
func controlActivityOptions() workflow.ActivityOptions {
	return workflow.ActivityOptions{
		StartToCloseTimeout: 5 * time.Minute,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second,
			NonRetryableErrorTypes: []string{"InvalidSpec"},
		},
	}
}

// flushChanges writes pending ring changes to node_weight_history.
func (d *dispatcher) flushChanges() {
	if len(d.changes) == 0 || d.holdingBack(callChanges) {
		return
	}
	req := campaign.RecordRingChangesRequest{CampaignKey: d.key, Run: d.run, Changes: d.changes}
	d.changes = nil
	d.ops++
	f := workflow.ExecuteLocalActivity(d.localOptions(), campaign.RecordRingChangesActivity, req)
	d.sel.AddFuture(f, func(f workflow.Future) {
		d.ops--
		err := f.Get(d.ctx, nil)
		if err == nil {
			d.controlSucceeded(callChanges)
			return
		}
		// Kept, in order, for the next write (or the next run).
		d.controlFailed(callChanges, err)
		d.changes = append(req.Changes, d.changes...)
	})
}
