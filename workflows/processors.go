package workflows

import (
	"errors"
	"fmt"
	"time"

	"github.com/cespare/xxhash/v2"
	enums "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/spiderpool/spiderpool/campaign"
)

// processorsChange versions delivery of pages to processors. Version 8
// (v0.11.0) is the oldest this code runs (docs/upgrading.md): a processor
// that takes its batches by reference runs them in the campaign's own
// history, each a token, and one that takes them inline (or finds no node
// serving batches) in ProcessBatch children; each batch holds its pages
// itself (campaign.DeliveryLeaseRequest.Held); nodes keep the pages for
// processors in chunks, a commit's in one row (store/chunks.go), and the
// children's workflow type is campaign.ChunkedBatchWorkflowType; a
// processor starts only as many batches as the pages counted waiting and
// not yet sent for fill (batchesToStart), and one that has caught up
// lingers only while the frontier has URLs waiting. From version 9 the
// batches of a child that failed or was terminated (from the Web UI, say)
// go back to pending with the next child's lease
// (DeliveryLeaseRequest.Release), and the processor is not done while they
// wait: before, they were stranded, the processor looked dry and the
// campaign completed without them. From version 10 a frontier lease that
// counts pages waiting for a processor wakes it if it found none (and, if
// they fill a batch, ends its linger and its wait for the batches beside a
// batch that found them held): in a pool run the looks at the figures,
// seconds apart, were its only news of pages, and the frontier, held back
// by max_pending, waited for them too.
const processorsChange = "processors"

// Versions of processorsChange: the oldest this code runs, and the
// latest, which new runs take.
const (
	minProcessorsVersion = 8
	maxProcessorsVersion = 10
)

// handOnWait is how long continue-as-new waits for the processors'
// batches in flight: a processor that answers comes back in that time,
// and its batches are not sent again; one that is down leaves its
// batches to the next run.
const handOnWait = 30 * time.Second

// processorCooldown is how long a processor's leasing rests after a batch
// could not lease (Postgres away).
const processorCooldown = 5 * time.Second

// processor is one of the campaign's processors as the dispatcher drives
// it: pages flow from Postgres to its activity in batches, each a
// ProcessBatch child, at most spec.window at a time.
//
// Its batches are awaited at continue-as-new for handOnWait at most: what
// they held is leased in Postgres, and the next run's first lease returns
// it to pending (Reset), so a batch cut off then is delivered again; a
// lease of the ended run after that takes nothing (store.ReleaseDeliveries).
// Items are stored once per page whatever the number of deliveries.
type processor struct {
	spec campaign.Processor
	// batches counts the children under way; seq numbers them in the run.
	batches int
	seq     int64
	// reset: the run has not leased yet (see DeliveryLeaseRequest.Reset).
	reset bool
	// release: children that failed or were terminated, by first lease,
	// whose batches the next child returns to pending first (see
	// DeliveryLeaseRequest.Release).
	release []int64
	// dry: the last lease found no page pending. dryAt is the number of
	// frontier leases completed when that lease started: a dry lease
	// proves the processor is done only if it started after the frontier
	// lease that found the crawl finished.
	dry       bool
	dryAt     int64
	coolUntil time.Time
	// heldBeside: a batch found the pages waiting held by batches beside
	// it; the next to end lets the processor lease again.
	heldBeside bool
	// lingerUntil: the processor caught up; its next batch waits to fill.
	lingerUntil time.Time
	// unclaimed: the pages last counted waiting, less a batch's worth for
	// each batch started since (see batchesToStart).
	unclaimed int
	counters  campaign.ProcessorCounters
}

// setUpProcessors reads the version marker and the processors of the
// spec; carried counters go on.
func (d *dispatcher) setUpProcessors(carried []campaign.ProcessorStatus) {
	if len(d.spec.Processors) == 0 {
		return
	}
	v := workflow.GetVersion(d.ctx, processorsChange, workflow.DefaultVersion, maxProcessorsVersion)
	if v < minProcessorsVersion {
		retired(processorsChange, v)
	}
	d.releaseFailedBatches = v >= 9
	d.countWakesProcessors = v >= 10
	// A lease's high bits name the run (see campaign.LeaseRun): a hash of
	// its run ID, unique even when a campaign is started again under its ID.
	d.leaseRun = int64(xxhash.Sum64String(workflow.GetInfo(d.ctx).WorkflowExecution.RunID) >> 33)
	for _, ps := range d.spec.Processors {
		p := &processor{spec: ps, reset: true}
		for _, c := range carried {
			if c.Name == ps.Name {
				p.counters = c.ProcessorCounters
				p.counters.InFlight = 0
				p.counted(c.Waiting)
			}
		}
		d.procs = append(d.procs, p)
	}
}

// pagesMayHaveArrived: a batch committed pages, so processors that found
// nothing may find some now.
func (d *dispatcher) pagesMayHaveArrived() {
	for _, p := range d.procs {
		p.dry = false
	}
}

// frontierSettled: the last frontier lease found nothing pending or
// leased anywhere, and nothing is in flight.
func (d *dispatcher) frontierSettled() bool {
	l := d.lastLease
	return d.quiet() && d.leaseDry && l.LeasedElsewhere == 0 && (l.Pending == 0 || l.BudgetExhausted)
}

// processorsDone: every processor has taken every page there is.
func (d *dispatcher) processorsDone() bool {
	for _, p := range d.procs {
		if p.batches > 0 || !p.dry || p.dryAt != d.frontierLeases || len(p.release) > 0 {
			return false
		}
	}
	return true
}

// processorsWaiting takes the pages waiting per processor that a frontier
// lease counted (none in histories from before it did). From version 10
// the count is news of pages for a processor that found none and, when it
// fills a batch, for one lingering or waiting on the batches beside it.
func (d *dispatcher) processorsWaiting(waiting map[string]int) {
	for _, p := range d.procs {
		n, ok := waiting[p.spec.Name]
		if !ok {
			continue
		}
		p.counted(n)
		if d.countWakesProcessors && n > 0 {
			p.dry = false
			if n >= p.spec.BatchSize {
				p.lingerUntil, p.heldBeside = time.Time{}, false
			}
		}
	}
}

// processorBacklog names a processor with max_pending pages waiting: the
// frontier waits for it. The pages waiting are those no batch was started
// for since they were counted (unclaimed): the batches a count started
// take its pages, and the frontier goes on at once.
func (d *dispatcher) processorBacklog() string {
	for _, p := range d.procs {
		if p.unclaimed >= p.spec.MaxPending {
			return p.spec.Name
		}
	}
	return ""
}

// deliver starts a batch for each processor with room in its window and,
// maybe, pages waiting.
func (d *dispatcher) deliver() {
	now := workflow.Now(d.ctx)
	for _, p := range d.procs {
		if p.dry && d.frontierSettled() && p.dryAt != d.frontierLeases {
			p.dry = false // the crawl looks done: one more look, after it
		}
		if now.Before(p.lingerUntil) && !d.frontierSettled() {
			continue
		}
		for n := p.batchesToStart(now); n > 0; n-- {
			d.startBatch(p)
		}
	}
}

// batchesToStart is how many batches deliver starts for p now: one when
// none is out, and otherwise as many as the pages counted waiting and not
// yet sent for fill, as far as its window has room.
//
// The last of those may be part-filled. Starting only full ones while
// the frontier had URLs waiting was tried, and did not make batches
// fuller: 100,000-page crawls in batches of 1,000 still ran 142 and 128
// batches (131 so). Part-filled batches come mostly from the leases of
// batches already out, which go on while full ones wait and share a pool
// that max_pending keeps to two batches' worth.
func (p *processor) batchesToStart(now time.Time) int {
	if (p.dry && len(p.release) == 0) || p.heldBeside || now.Before(p.coolUntil) {
		return 0
	}
	fill := (max(p.unclaimed, 0) + p.spec.BatchSize - 1) / p.spec.BatchSize
	if p.batches == 0 {
		fill = max(fill, 1) // a look: the count may be out of date
	}
	return max(min(p.spec.Window-p.batches, fill), 0)
}

// counted takes a count of the pages waiting: all of them unclaimed.
func (p *processor) counted(waiting int) {
	p.counters.Waiting, p.unclaimed = waiting, waiting
}

// began notes a batch started: one more out, a batch's worth of the
// pages counted sent for.
func (p *processor) began() {
	p.batches++
	p.counters.InFlight = p.batches
	p.unclaimed -= p.spec.BatchSize
}

// startBatch starts a ProcessBatch child for p's next batches. The first
// of a run also returns to pending what past runs held.
func (d *dispatcher) startBatch(p *processor) {
	p.began()
	p.seq++
	started := d.frontierLeases
	req := campaign.ProcessBatchRequest{
		Processor: p.spec,
		Lease: campaign.DeliveryLeaseRequest{
			CampaignKey: d.key, CampaignID: d.id, Processor: p.spec.Name, Reset: p.reset,
			Lease: d.leaseRun<<32 | p.seq<<8, Held: true, Release: p.release,
		},
	}
	p.reset, p.release = false, nil
	cctx := workflow.WithChildOptions(d.ctx, workflow.ChildWorkflowOptions{
		WorkflowID:    fmt.Sprintf("%s/%s/%08x-%d", d.id, p.spec.Name, d.leaseRun, p.seq),
		StaticSummary: fmt.Sprintf("processor %s: batches of run %d, #%d", p.spec.Name, d.run, p.seq),
		// Batches cut off when the run closes are delivered again by the
		// next run (Reset).
		ParentClosePolicy: enums.PARENT_CLOSE_POLICY_TERMINATE,
	})
	var f workflow.Future
	if p.spec.Batch == campaign.BatchReference {
		inRun, done := workflow.NewFuture(d.ctx)
		workflow.Go(d.ctx, func(ctx workflow.Context) {
			done.Set(batchesByReference(ctx, cctx, req))
		})
		f = inRun
	} else {
		f = workflow.ExecuteChildWorkflow(cctx, campaign.ChunkedBatchWorkflowType, req)
	}
	d.sel.AddFuture(f, func(f workflow.Future) { d.batchEnded(p, req.Lease, started, f) })
}

// batchEnded takes a ProcessBatch child's end: its figures, and what p
// does next. lr is the lease it was started with, started the frontier
// leases completed then.
func (d *dispatcher) batchEnded(p *processor, lr campaign.DeliveryLeaseRequest, started int64, f workflow.Future) {
	p.batches--
	p.counters.InFlight = p.batches
	p.heldBeside = false // what this batch held is stored, or back
	var res campaign.ProcessBatchResult
	err := f.Get(d.ctx, &res)
	var canceled *temporal.CanceledError
	switch {
	case err != nil && (d.cancelled || errors.As(err, &canceled)):
		// The campaign is being cancelled: the pages stay leased, and a
		// campaign started again under its ID delivers them again.
		return
	case err != nil:
		// Failed or terminated (from the Web UI, say): what its batches
		// hold goes back with the next child's lease, and so do those
		// of the children this one was to release. Until then the
		// processor is not dry: those pages wait.
		d.log.Warn("a processor's batch failed; leasing again shortly", "processor", p.spec.Name, "error", err)
		p.reset = p.reset || lr.Reset // it may not have reset
		if d.releaseFailedBatches {
			p.release = append(append(p.release, lr.Release...), lr.Lease)
			p.dry = false
		}
		p.coolUntil = workflow.Now(d.ctx).Add(processorCooldown)
		d.wakeAt(processorCooldown)
		return
	}
	d.processed(p, res)
	switch {
	case res.LeaseFailed:
		p.coolUntil = workflow.Now(d.ctx).Add(processorCooldown)
		d.wakeAt(processorCooldown)
	case res.Pages == 0 && res.Waiting == 0:
		p.dry, p.dryAt = true, started
	case res.Pages == 0 && p.batches > 0:
		// Pages wait but the batches beside this one hold them: the
		// next of those to end wakes the loop.
		p.heldBeside = true
	case res.Pages == 0:
		// Pages wait but a lease beside this one held them: look
		// again shortly.
		p.coolUntil = workflow.Now(d.ctx).Add(time.Second)
		d.wakeAt(time.Second)
	case res.Waiting < p.spec.BatchSize && d.lastLease.Pending > 0:
		// The processor has caught up with the crawl: the next batch
		// waits a little to fill (unless the crawl is done, or its last
		// URLs are out).
		p.lingerUntil = workflow.Now(d.ctx).Add(processorLinger)
		d.wakeAt(processorLinger)
	}
}

// processed adds what a ProcessBatch child did to the figures.
func (d *dispatcher) processed(p *processor, res campaign.ProcessBatchResult) {
	p.counted(res.Waiting)
	p.counters.Batches += int64(res.Batches)
	p.counters.Processed += int64(res.Stored.Processed)
	p.counters.Failed += int64(res.Stored.Failed)
	p.counters.Items += int64(res.Stored.Items)
	if res.Error != "" {
		p.counters.LastError = res.Error
	}
	d.counters.Discovered += int64(res.Stored.Discovered)
	if res.Stored.Discovered > 0 {
		d.leaseDry = false
	}
}

// A ProcessBatch child takes batches one after another while full ones
// wait, up to maxChildBatches or maxChildHistory bytes of history.
const (
	maxChildBatches = 16
	maxChildHistory = 8 << 20
)

// processorLinger is how long a processor that has caught up with the
// crawl waits before its next batch, so that batches go out full.
const processorLinger = time.Second

// errUnserved: a lease by reference found no node that serves batches.
var errUnserved = errors.New("no node serves batches")

// batchesByReference carries batches through a processor that takes them
// by reference, in the campaign's own history; when no node serves batches
// it hands them to a ProcessBatch child (cctx), which sends their pages
// inline.
func batchesByReference(ctx, cctx workflow.Context, req campaign.ProcessBatchRequest) (campaign.ProcessBatchResult, error) {
	byRef := req
	byRef.Lease.ByReference = true
	res, err := ProcessBatch(ctx, byRef)
	if !errors.Is(err, errUnserved) {
		return res, err
	}
	err = workflow.ExecuteChildWorkflow(cctx, campaign.ChunkedBatchWorkflowType, req).Get(ctx, &res)
	return res, err
}

// ProcessBatch carries batches through a processor, as a child of its
// campaign. For each, it leases the batch (a local activity: the bodies
// are recorded in this child's history, never in the campaign's), runs
// the processor's activity on it with the processor's retry policy, and
// stores what it returned, or its failure once the policy gave up. It
// goes on to the next batch while the last was full.
//
// The campaign also calls it in its own run, for batches by reference
// (see batchesByReference): a lease by reference that no node can serve
// returns errUnserved, having leased nothing.
func ProcessBatch(ctx workflow.Context, req campaign.ProcessBatchRequest) (campaign.ProcessBatchResult, error) {
	var res campaign.ProcessBatchResult
	local := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		ScheduleToCloseTimeout: time.Minute,
		StartToCloseTimeout:    30 * time.Second,
	})
	for i := range int64(maxChildBatches) {
		lr := req.Lease
		lr.Lease, lr.Reset = req.Lease.Lease|i, req.Lease.Reset && i == 0
		var lease campaign.DeliveryLease
		if err := workflow.ExecuteLocalActivity(local, campaign.LeaseDeliveriesActivity, lr).Get(ctx, &lease); err != nil {
			if i == 0 {
				return res, fmt.Errorf("lease pages for processor %s: %w", req.Processor.Name, err)
			}
			res.LeaseFailed = true
			return res, nil
		}
		if lease.Unserved {
			if i == 0 {
				return res, errUnserved
			}
			res.LeaseFailed = true // the next batch goes to a child
			return res, nil
		}
		res.Waiting = lease.Waiting
		if len(lease.IDs) == 0 {
			return res, nil
		}
		if err := processLease(ctx, local, req.Processor, lr, lease, &res); err != nil {
			return res, err
		}
		if len(lease.IDs) < req.Processor.BatchSize || lease.Waiting < req.Processor.BatchSize ||
			workflow.GetInfo(ctx).GetCurrentHistorySize() > maxChildHistory {
			break
		}
	}
	return res, nil
}

// processLease sends one leased batch to the processor and stores the
// outcome.
func processLease(ctx, local workflow.Context, p campaign.Processor, lr campaign.DeliveryLeaseRequest, lease campaign.DeliveryLease, res *campaign.ProcessBatchResult) error {
	r := p.Retry
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           p.TaskQueue,
		StartToCloseTimeout: p.Timeout.D(),
		Summary:             fmt.Sprintf("%s: %d pages", p.Name, len(lease.IDs)),
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: r.InitialInterval.D(), BackoffCoefficient: r.BackoffCoefficient,
			MaximumInterval: r.MaxInterval.D(), MaximumAttempts: int32(r.MaxAttempts),
		},
	})
	var result campaign.ProcessResult
	err := workflow.ExecuteActivity(actx, p.Activity, lease.Request).Get(ctx, &result)
	var canceled *temporal.CanceledError
	if errors.As(err, &canceled) {
		return err // the campaign is being cancelled: the pages stay leased
	}
	store := campaign.StoreProcessedRequest{
		CampaignKey: lr.CampaignKey, CampaignID: lr.CampaignID, Processor: p.Name, IDs: lease.IDs,
		Lease: lr.Lease, Held: lr.Held,
	}
	if b := lease.Request.Batch; b != nil {
		store.Batch = b.Token
	}
	if err != nil {
		store.Error = processorError(err)
		res.Error = store.Error
	} else {
		store.Result = &result
	}
	// Stored in a local activity, without a round trip through the
	// server; while Postgres is away, in a regular one retried until it
	// takes them, which costs no history while it waits.
	var stored campaign.StoreProcessedResult
	if err := workflow.ExecuteLocalActivity(local, campaign.StoreProcessedActivity, store).Get(ctx, &stored); err != nil {
		sctx := workflow.WithActivityOptions(ctx, controlActivityOptions())
		if err := workflow.ExecuteActivity(sctx, campaign.StoreProcessedActivity, store).Get(ctx, &stored); err != nil {
			return fmt.Errorf("store what processor %s made of %d pages: %w", p.Name, len(lease.IDs), err)
		}
	}
	res.Batches++
	res.Pages += len(lease.IDs)
	res.Stored.Processed += stored.Processed
	res.Stored.Failed += stored.Failed
	res.Stored.Items += stored.Items
	res.Stored.Discovered += stored.Discovered
	return nil
}

// processorError is what a page that failed with its batch records: the
// activity's own message, without the SDK's wrapping.
func processorError(err error) string {
	var appErr *temporal.ApplicationError
	var timeoutErr *temporal.TimeoutError
	switch {
	case errors.As(err, &appErr):
		return appErr.Error()
	case errors.As(err, &timeoutErr):
		return "processor timed out: " + timeoutErr.Error()
	}
	return err.Error()
}

// processorStatus is what status and continue-as-new report of the
// processors.
func (d *dispatcher) processorStatus() []campaign.ProcessorStatus {
	var out []campaign.ProcessorStatus
	for _, p := range d.procs {
		out = append(out, campaign.ProcessorStatus{Name: p.spec.Name, ProcessorCounters: p.counters})
	}
	return out
}

// bodyChunks: the nodes keep pages for the processors in chunks (see
// processorsChange); a campaign without processors keeps none.
func (d *dispatcher) bodyChunks() bool { return len(d.procs) > 0 }

// wakeAt wakes the loop after wait, once.
func (d *dispatcher) wakeAt(wait time.Duration) {
	d.sel.AddFuture(workflow.NewTimer(d.ctx, wait), func(workflow.Future) {})
}

// processorsHandedOn says whether the run may continue as new as far as
// its processors go: no batch in flight, or handOnWait spent waiting.
func (d *dispatcher) processorsHandedOn() bool {
	busy := false
	for _, p := range d.procs {
		busy = busy || p.batches > 0
	}
	if !busy {
		return true
	}
	now := workflow.Now(d.ctx)
	if d.handOnSince.IsZero() {
		d.handOnSince = now
		d.wakeAt(handOnWait)
	}
	return now.Sub(d.handOnSince) >= handOnWait
}
