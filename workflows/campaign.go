// Package workflows holds CrawlCampaign, the campaign dispatcher: it leases
// what each host can absorb from the frontier, routed by the ring to the
// nodes with room in their window, applies operator signals and updates,
// and continues as new before its history grows large, without waiting for
// the batches in flight.
//
// Flow control, in short: a host gets work for about Horizon at the rate
// its politeness allows, and more once half of it is done (store.LeaseHosts);
// a node has at most window_per_node batches of a campaign in flight,
// written to Postgres, where the node's puller takes them (pool runs; runs
// started before them schedule a FetchBatch activity per batch); a node
// leaves the ring only when its registry heartbeat says so. See
// docs/pool.md and docs/architecture.md.
//
// Workflow code here is deterministic: no I/O, clock, randomness or map
// iteration order; every side effect is an activity in package activities.
// Runs started under v0.1.0 go on under package legacy, then hand over.
package workflows

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/ring"
	"github.com/spiderpool/spiderpool/workflows/legacy"
)

// Register is what a worker registers: the workflow under its public name.
func Register(r interface {
	RegisterWorkflowWithOptions(any, workflow.RegisterOptions)
}) {
	r.RegisterWorkflowWithOptions(CrawlCampaign, workflow.RegisterOptions{Name: campaign.WorkflowType})
	r.RegisterWorkflowWithOptions(ProcessBatch, workflow.RegisterOptions{Name: campaign.ProcessBatchWorkflowType})
	r.RegisterWorkflowWithOptions(ProcessBatch, workflow.RegisterOptions{Name: campaign.ChunkedBatchWorkflowType})
}

// hostFlowChange versions the dispatcher: runs that started before it
// (no marker in their history) go on under package legacy; version 1
// schedules a FetchBatch activity per batch; version 2 (pool runs, see
// pool.go) routes batches into Postgres for the nodes to take. A node
// built before version 2 fails a pool run's workflow tasks (the marker's
// version is unknown to it) rather than running them, and takes none of
// its batches (it does not declare campaign.CapPull).
const hostFlowChange = "host-aware-flow"

// Versions of hostFlowChange.
const (
	batchRuns = 1
	poolRuns  = 2
)

// boundedRunChange versions two bounds on a run (issue 11, defect 1). A
// run after it forgets, once released, the batches a previous run handed
// on for nodes dead already, as died does for a node dying during the run,
// so a dead node leaves the carry at the next continue-as-new; before it,
// a dead node whose batch never reported was carried from run to run. And
// it offers a lease no more batches than the run's history has room for
// (see historyRoom); before it, the last lease of a run with many nodes
// could add thousands of events past max_history_events.
const boundedRunChange = "bounded-run"

// staleRouteChange versions two guards on where a batch goes. A lease
// answered after one of its nodes died or was drained (the registry read
// that says so can land in the same workflow task) hands that node's URLs
// back instead of scheduling a batch on a queue nobody polls: with no
// ScheduleToStart, such a batch was never cancelled and the run never
// ended. And each batch carries its seq as Route, which v0.1.0 nodes put
// in their holder name: without it every batch a v0.1.0 node ran was
// "node/r0/a0.1", and the first to finish dropped its siblings' holds.
const staleRouteChange = "stale-route"

// batchEvents is what one batch may cost a run's history: scheduled,
// cancel requested, started, closed, and the workflow task its result
// wakes.
const batchEvents = 7

// CrawlCampaign crawls spec to completion and returns the summary from
// Postgres. carry is nil on a fresh start and set by continue-as-new; the
// campaign ID is the workflow ID.
//
// It can be started with `temporal workflow start --type CrawlCampaign
// --task-queue spiderpool.control --input '{"seeds":["http://..."]}'`: the
// spec gets the same defaults as from the CLI.
func CrawlCampaign(ctx workflow.Context, spec campaign.Spec, carry *campaign.Carry) (campaign.Summary, error) {
	v := workflow.GetVersion(ctx, hostFlowChange, workflow.DefaultVersion, poolRuns)
	if v == workflow.DefaultVersion {
		return legacy.CrawlCampaign(ctx, spec, carry)
	}
	d, err := newDispatcher(ctx, spec, carry, v == poolRuns)
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
	// maxOrphans bounds the batches whose late reports a run still takes.
	maxOrphans = 1000
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
	ring  *ring.Ring

	counters campaign.Counters
	paused   bool
	rejected []string
	changes  []campaign.RingChange

	sel      workflow.Selector
	wake     workflow.Channel
	open     []*batch // in flight, by seq
	inflight int      // URLs in them
	batchSeq int64
	orphans  []campaign.OrphanBatch // by seq

	leasing       bool
	lastLease     campaign.HostLease
	leasedAt      time.Time
	leaseDry      bool  // the last lease found nothing due
	completions   int64 // batch completions, to tell whether a lease is stale
	leaseStartSeq int64
	// dispatchedLease is the newest lease routed so far.
	dispatchedLease int64
	timerSet        bool
	ops             int // releases and ring-change writes outstanding
	cancelled       bool
	state           string

	// waitOutages: this run holds failed control calls back
	// (controlRetryChange); out is the state of that.
	waitOutages bool
	out         outage
	// boundedRun: see boundedRunChange.
	boundedRun bool
	// routeGuard: see staleRouteChange.
	routeGuard bool

	attrs []string  // search attributes the namespace has (see progress)
	pub   published // what they last said

	// procs are the campaign's processors (processorsChange);
	// frontierLeases counts the frontier leases that completed; leaseRun
	// names this run in processor leases (see campaign.LeaseRun).
	procs          []*processor
	frontierLeases int64
	leaseRun       int64
	// batchesInRun, leaseHeld, lingerToEnd, waitBeside, startByWaiting,
	// bodyChunks and releaseFailedBatches: see processorsChange, versions
	// 3 to 9.
	batchesInRun         bool
	leaseHeld            bool
	lingerToEnd          bool
	waitBeside           bool
	startByWaiting       bool
	bodyChunks           bool
	releaseFailedBatches bool
	// handOnSince: when continue-as-new began waiting for processor
	// batches (see processorsHandedOn).
	handOnSince time.Time

	// pool: a pool run (see pool.go). progressDue, readingProgress and
	// progressAfter drive its looks at the figures; poolTotals are the
	// totals of the last look; leftDuringLease are the nodes that left the
	// ring while a lease ran (their batches of it go back).
	pool            bool
	progressDue     bool
	readingProgress bool
	progressAfter   string
	poolTotals      campaign.BatchResult
	leftDuringLease []string
}

// batch is one FetchBatch in flight.
type batch struct {
	seq     int64
	node    string
	leaseID int64
	ids     []int64
	cancel  workflow.CancelFunc
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

func newDispatcher(ctx workflow.Context, spec campaign.Spec, carry *campaign.Carry, pool bool) (*dispatcher, error) {
	info := workflow.GetInfo(ctx)
	d := &dispatcher{
		ctx: ctx, id: info.WorkflowExecution.ID,
		nodes: map[string]*node{}, ring: ring.New(), state: "starting", pool: pool,
	}
	normalized, err := normalize(ctx, spec)
	if err != nil {
		return nil, temporal.NewNonRetryableApplicationError("invalid campaign spec: "+err.Error(), "InvalidSpec", nil)
	}
	d.spec = normalized
	d.waitOutages = workflow.GetVersion(ctx, controlRetryChange, workflow.DefaultVersion, 1) == 1
	d.boundedRun = workflow.GetVersion(ctx, boundedRunChange, workflow.DefaultVersion, 1) == 1
	d.routeGuard = workflow.GetVersion(ctx, staleRouteChange, workflow.DefaultVersion, 1) == 1
	d.run = 1
	var carriedProcs []campaign.ProcessorStatus
	if carry != nil {
		carriedProcs = carry.Processors
		d.key, d.run, d.counters, d.paused, d.rejected = carry.CampaignKey, carry.Run+1, carry.Counters, carry.Paused, carry.Rejected
		d.dispatchedLease, d.attrs, d.batchSeq, d.orphans = carry.DispatchedLease, carry.SearchAttributes, carry.BatchSeq, carry.Orphans
		d.changes = carry.Changes
		if carry.PoolTotals != nil && pool {
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
	switch {
	case d.pool:
		// A pool run takes no batch reports: what its predecessor's batches
		// do is counted in Postgres, and the summary has it.
		d.orphans = nil
		d.scheduleProgress()
	case d.boundedRun:
		d.forgetDeadOrphans()
	}
	d.refreshMembership()
	if !d.waitOutages {
		// Runs before controlRetryChange keep the second chain of
		// refreshes this started: refreshMembership times the next one
		// from its own end already.
		d.scheduleMembershipTimer()
	}
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
			if d.pool {
				d.maybeReadProgress()
			}
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
	return len(d.open) == 0 && !d.leasing && d.ops == 0
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
// It does not grow with the nodes: batches in flight are handed on, not
// awaited, and the last lease's batches fit in historyRoom, so the margin
// covers only the lease and the writes outstanding when it falls due.
func (d *dispatcher) historyMargin() int {
	return min(500, d.spec.Dispatch.MaxHistoryEvents/5)
}

// historyRoom is how many batches the run's history has room for: those
// of a lease made just before continue-as-new falls due must fit in half
// the margin.
func (d *dispatcher) historyRoom() int {
	left := d.spec.Dispatch.MaxHistoryEvents - d.historyMargin()/2 - workflow.GetInfo(d.ctx).GetCurrentHistoryLength()
	return max(1, left/batchEvents)
}

// continueAsNew hands the campaign to a new run. Batches in flight go on:
// their nodes report them to the new run by signal (see OrphanBatch), and
// the new run releases what no node picked up before this run closed.
func (d *dispatcher) continueAsNew() error {
	d.drainSignals()
	orphans := d.orphans
	for _, b := range d.open {
		orphans = append(orphans, campaign.OrphanBatch{Seq: b.seq, Node: b.node, LeaseID: b.leaseID})
	}
	carry := &campaign.Carry{
		CampaignKey: d.key, Run: d.run, Counters: d.counters, Paused: d.paused, Rejected: d.rejected,
		DispatchedLease: d.dispatchedLease, SearchAttributes: d.attrs, BatchSeq: d.batchSeq,
		Orphans: lastOrphans(orphans),
		// Ring changes not yet written (Postgres away): the next run
		// writes them.
		Changes:    d.changes,
		Processors: d.processorStatus(),
	}
	if d.pool {
		totals := d.poolTotals
		carry.PoolTotals = &totals
	}
	for _, id := range d.order {
		n := d.nodes[id]
		if n.health == dead && !d.hasOrphansOn(id) && n.inflight == 0 {
			continue // long gone: its history is in node_weight_history
		}
		carry.Nodes = append(carry.Nodes, n.carried())
	}
	d.log.Info("continuing as new", "run", d.run, "history_events", workflow.GetInfo(d.ctx).GetCurrentHistoryLength(),
		"batches_in_flight", len(d.open))
	return workflow.NewContinueAsNewError(d.ctx, campaign.WorkflowType, d.spec, carry)
}

func lastOrphans(o []campaign.OrphanBatch) []campaign.OrphanBatch {
	if len(o) > maxOrphans {
		return o[len(o)-maxOrphans:]
	}
	return o
}

func (d *dispatcher) hasOrphansOn(node string) bool {
	for _, o := range d.orphans {
		if o.Node == node {
			return true
		}
	}
	return false
}

// releaseOrphanedLeases returns to pending the URLs of carried batches
// that no node picked up before the last run closed: none ever will.
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
}

// forgetDeadOrphans drops the carried batches of nodes dead already: their
// URLs were just released (or their leases expire), and a dead node sends
// no report. A node the registry calls dead while it fetches on loses its
// late reports from the counters; the summary, from Postgres, has them.
func (d *dispatcher) forgetDeadOrphans() {
	kept := d.orphans[:0]
	for _, o := range d.orphans {
		if n, ok := d.nodes[o.Node]; ok && n.health != dead {
			kept = append(kept, o)
		}
	}
	d.orphans = kept
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
// truth: the counters sum batch reports, and a node that dies after a
// commit but before it reports (or heartbeats) leaves pages out of them.
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
	if !d.pool {
		return
	}
	if err := d.readProgressNow(ctx, nil, 0); err != nil {
		d.log.Warn("reading the nodes' last figures failed", "error", err)
	}
}

// finishCancelled waits for in-flight batches to hand their URLs back, then
// records the outcome.
func (d *dispatcher) finishCancelled() (campaign.Summary, error) {
	d.state = "cancelling"
	ctx, _ := workflow.NewDisconnectedContext(d.ctx)
	for !d.quiet() {
		d.sel.Select(ctx) // batches answer the cancellation with what they did
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

// rooms lists the ring's members with the batches each may take now: the
// window holds per node.
func (d *dispatcher) rooms() (nodes []campaign.LeaseNode, room int) {
	now := workflow.Now(d.ctx)
	for _, id := range d.order {
		n := d.nodes[id]
		w := n.effectiveWeight()
		if w <= 0 {
			continue
		}
		free := max(0, d.spec.Dispatch.WindowPerNode-n.inflight)
		if now.Before(n.coolUntil) {
			free = 0 // its last batch failed: its hosts wait a little
		}
		nodes = append(nodes, campaign.LeaseNode{ID: id, Weight: w, Batches: free})
		room += free
	}
	return nodes, room
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
	nodes, room := d.rooms()
	if d.pool {
		nodes = d.poolMembers()
		room = len(nodes) // each node's room is counted by the lease
	} else if d.boundedRun {
		nodes, room = capRooms(nodes, room, d.historyRoom())
	}
	switch {
	case len(nodes) == 0:
		d.state = "waiting for nodes"
		return
	case room == 0 || d.leaseDry:
		if len(d.open) == 0 {
			d.state = "waiting for due URLs"
		}
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
	}
	if d.pool {
		req.Assign = &campaign.Assign{
			CampaignID: d.id, Window: d.spec.Dispatch.WindowPerNode,
			HandBackAfter: campaign.Duration(handBackAfter), BodyChunks: d.bodyChunks,
		}
	}
	f := workflow.ExecuteLocalActivity(d.localOptions(), campaign.LeaseHostsActivity, req)
	d.sel.AddFuture(f, func(f workflow.Future) {
		d.leasing = false
		d.leasedAt = workflow.Now(d.ctx)
		var lease campaign.HostLease
		if err := f.Get(d.ctx, &lease); err != nil {
			next := 5 * time.Second
			if d.waitOutages {
				next = d.controlFailed(callLease, err)
			} else {
				d.log.Warn("lease failed", "error", err)
			}
			d.leaseDry, d.lastLease = true, campaign.HostLease{Pending: 1, NextDue: campaign.Duration(next)}
			return
		}
		d.controlSucceeded(callLease)
		d.lastLease = lease
		d.frontierLeases++
		d.processorsWaiting(lease.ProcessorsWaiting)
		if d.pool {
			if lease.Routed.URLs == 0 {
				// Stale if batches ended meanwhile (a look at the figures
				// said so): they may have added links or freed hosts.
				d.leaseDry = d.completions == d.leaseStartSeq
				d.leftDuringLease = nil
				return
			}
			d.routed(lease)
			return
		}
		if lease.Size() == 0 {
			// Stale if a batch finished meanwhile: it may have added links
			// or freed its hosts.
			d.leaseDry = d.completions == d.leaseStartSeq
			return
		}
		d.counters.Leased += int64(lease.Size())
		d.dispatchedLease = lease.LeaseID
		for _, nb := range lease.Batches {
			if n := d.nodes[nb.Node]; d.routeGuard && (n == nil || n.state() != campaign.NodeActive) {
				d.release(lease.LeaseID, nb.IDs()) // its node left while the lease ran
				continue
			}
			d.schedule(lease.LeaseID, nb)
		}
	})
}

// capRooms shares limit batches among the nodes' rooms, one to each in
// turn, when their rooms add up to more.
func capRooms(nodes []campaign.LeaseNode, room, limit int) ([]campaign.LeaseNode, int) {
	if room <= limit {
		return nodes, room
	}
	capped := slices.Clone(nodes)
	for i := range capped {
		capped[i].Batches = 0
	}
	for given := 0; given < limit; {
		for i := range capped {
			if given < limit && capped[i].Batches < nodes[i].Batches {
				capped[i].Batches++
				given++
			}
		}
	}
	return capped, limit
}

// maybeWaitTimer sleeps until leasing makes sense again, when nothing else
// would wake the loop first: URLs in retry backoff, hosts under their
// quota or paused, leases to expire, or the lease pace.
func (d *dispatcher) maybeWaitTimer() {
	if d.timerSet || d.leasing || d.paused || d.holdingBack(callLease) || d.continueAsNewDue() {
		return // holding back, retryControl's timer wakes the loop
	}
	if _, room := d.rooms(); room == 0 && !d.pool {
		return // a batch completing wakes the loop
	}
	var wait time.Duration
	switch since := workflow.Now(d.ctx).Sub(d.leasedAt); {
	case d.leaseDry && d.pool && d.lastLease.LeasedElsewhere > 0:
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

// schedule sends one batch to its node.
func (d *dispatcher) schedule(leaseID int64, nb campaign.NodeBatch) {
	d.batchSeq++
	b := &batch{seq: d.batchSeq, node: nb.Node, leaseID: leaseID, ids: nb.IDs()}
	n := d.nodes[b.node]
	n.inflight++
	n.inflightN += len(b.ids)
	n.batchesSent++
	d.open = append(d.open, b)
	d.inflight += len(b.ids)
	d.counters.Batches++
	var actx workflow.Context
	actx, b.cancel = workflow.WithCancel(d.ctx)
	actx = workflow.WithActivityOptions(actx, workflow.ActivityOptions{
		TaskQueue: campaign.NodeQueue(b.node),
		// No ScheduleToStart: a queue takes as long as it takes. A dead
		// node is known by its registry heartbeat, and its batches are
		// cancelled then (see applyMembership).
		StartToCloseTimeout: time.Hour,
		HeartbeatTimeout:    d.spec.Dispatch.HeartbeatTimeout.D(),
		WaitForCancellation: true,
		Summary:             fmt.Sprintf("fetch %d URLs on %s", len(b.ids), b.node),
		// A batch that fails goes back to the frontier, not to the same
		// node again: see batchDone.
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1},
	})
	req := campaign.FetchBatchRequest{
		CampaignID: d.id, CampaignKey: d.key, LeaseID: b.leaseID, Node: b.node, IDs: b.ids,
		Seq: b.seq, HandBackAfter: campaign.Duration(handBackAfter), BodyChunks: d.bodyChunks,
	}
	if d.routeGuard {
		req.Route = int(b.seq)
	}
	f := workflow.ExecuteActivity(actx, campaign.FetchBatchActivity, req)
	d.sel.AddFuture(f, func(f workflow.Future) { d.batchDone(b, f) })
}

func (d *dispatcher) batchDone(b *batch, f workflow.Future) {
	n := d.nodes[b.node]
	for i, o := range d.open {
		if o == b {
			d.open = append(d.open[:i:i], d.open[i+1:]...)
			break
		}
	}
	// A draining node's last batch in makes it drained: a recorded change.
	d.mutate(n, reasonDrainDone, func() {
		n.inflight--
		n.inflightN -= len(b.ids)
	})
	d.inflight -= len(b.ids)
	d.completions++
	d.leaseDry = false
	d.pagesMayHaveArrived()

	var res campaign.BatchResult
	err := f.Get(d.ctx, &res)
	if err == nil {
		d.account(n, res)
		n.failures = 0
		return
	}
	d.account(n, partial(err))
	if d.cancelled {
		return // winding down: what is left stays leased until its lease expires
	}
	var (
		timeoutErr  *temporal.TimeoutError
		canceledErr *temporal.CanceledError
	)
	switch {
	case errors.As(err, &timeoutErr), errors.As(err, &canceledErr):
		// Its node died or was cut off: what no live node holds goes back
		// now; what it still holds it may finish, and report late.
		d.log.Warn("batch lost with its node; its URLs go back to the frontier", "node", b.node, "urls", len(b.ids), "error", err)
		d.counters.Rerouted++
		d.orphans = lastOrphans(append(d.orphans, campaign.OrphanBatch{Seq: b.seq, Node: b.node, LeaseID: b.leaseID}))
	default:
		// The node could not take it (Postgres away from it, say): back to
		// the frontier, and the node gets nothing new for a while.
		n.failures++
		n.coolUntil = workflow.Now(d.ctx).Add(min(time.Second<<min(n.failures, 6), time.Minute))
		d.log.Warn("batch failed; its URLs go back to the frontier", "node", b.node, "urls", len(b.ids), "error", err)
	}
	d.release(b.leaseID, b.ids)
}

// partial is what a failed batch settled, from its error's details.
func partial(err error) campaign.BatchResult {
	var (
		p           campaign.BatchResult
		timeoutErr  *temporal.TimeoutError
		canceledErr *temporal.CanceledError
		appErr      *temporal.ApplicationError
	)
	switch {
	case errors.As(err, &timeoutErr) && timeoutErr.HasLastHeartbeatDetails():
		_ = timeoutErr.LastHeartbeatDetails(&p)
	case errors.As(err, &canceledErr) && canceledErr.HasDetails():
		_ = canceledErr.Details(&p)
	case errors.As(err, &appErr) && appErr.HasDetails():
		_ = appErr.Details(&p)
	}
	return p
}

func (d *dispatcher) account(n *node, r campaign.BatchResult) {
	d.counters.Fetched += int64(r.Fetched)
	d.counters.Failed += int64(r.Failed)
	d.counters.Retried += int64(r.Retried)
	d.counters.Excluded += int64(r.Excluded)
	d.counters.Discovered += int64(r.Discovered)
	d.counters.Bytes += r.Bytes
	if n != nil {
		n.fetched += int64(r.Fetched)
		n.failed += int64(r.Failed)
		n.observe(r)
	}
}

// report takes a late batch's result, sent by its node as a signal.
func (d *dispatcher) report(r campaign.BatchReport) {
	for i, o := range d.orphans {
		if o.Seq == r.Seq {
			d.orphans = append(d.orphans[:i:i], d.orphans[i+1:]...)
			d.account(d.nodes[o.Node], r.Result)
			d.leaseDry = false
			d.pagesMayHaveArrived()
			return
		}
	}
	// Not an orphan of this campaign (or reported twice): already counted.
}

// release returns leased URLs no live node holds to pending.
func (d *dispatcher) release(leaseID int64, ids []int64) {
	d.releaseWith(campaign.ReleaseRequest{CampaignKey: d.key, LeaseID: leaseID, IDs: ids}, "batch given up")
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
			if d.waitOutages {
				// Tried again with the other calls; if the run continues
				// as new first, the lease expires instead.
				d.controlFailed(callRelease, err)
				d.out.releases = append(d.out.releases, req)
				return
			}
			d.log.Warn("release failed; the lease will expire instead", "why", why, "error", err)
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
		switch {
		case err == nil:
			d.controlSucceeded(callChanges)
		case d.waitOutages:
			// Kept, in order, for the next write (or the next run).
			d.controlFailed(callChanges, err)
			d.changes = append(req.Changes, d.changes...)
		default:
			d.log.Warn("recording ring changes failed", "error", err)
		}
	})
}
