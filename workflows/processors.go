package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/spiderpool/spiderpool/campaign"
)

// processorsChange versions delivery of pages to processors (issue 13).
// Runs before it never deliver; a spec with processors needs it.
const processorsChange = "processors"

// taskPayloadBudget bounds the payload bytes (lease results, processor
// inputs, results to store) the processors add in one workflow task: the
// task's completion carries them all, and the server takes at most 4 MiB.
// Past it, leasing waits for the next task.
const taskPayloadBudget = 2 << 20

// processorHistoryBytes is the history size a run with processors
// continues as new at (Temporal refuses a history past 50 MiB).
const processorHistoryBytes = 24 << 20

// handOnWait is how long continue-as-new waits for the processors'
// batches in flight: a processor that answers comes back in that time,
// and its batches are not sent again; one that is down leaves its
// batches to the next run.
const handOnWait = 30 * time.Second

// processorCooldown is how long a processor's leasing rests after a lease
// call failed (Postgres away).
const processorCooldown = 5 * time.Second

// processor is one of the campaign's processors as the dispatcher drives
// it: pages flow from Postgres to its activity in batches, at most
// spec.window at a time, and its results go back to Postgres.
//
// Its batches are not awaited at continue-as-new: what they held is
// leased in Postgres, and the next run's first lease returns it to
// pending (Reset), so a batch in flight then is delivered again. Items
// are stored once per page whatever the number of deliveries.
type processor struct {
	spec campaign.Processor
	// leases counts lease calls outstanding; seq numbers them in the run.
	leases int
	seq    int64
	// ready are leased batches waiting for room in a workflow task.
	ready []campaign.DeliveryLease
	// inflight counts batches at the processor or being stored.
	inflight int
	// reset: the run has not leased yet (see DeliveryLeaseRequest.Reset).
	reset bool
	// dry: the last lease found no page pending. dryAt is the number of
	// frontier leases completed when that lease started: a dry lease
	// proves the processor is done only if it started after the frontier
	// lease that found the crawl finished.
	dry       bool
	dryAt     int64
	coolUntil time.Time
	counters  campaign.ProcessorCounters
}

// setUpProcessors reads the version marker and the processors of the
// spec; carried counters go on.
func (d *dispatcher) setUpProcessors(carried []campaign.ProcessorStatus) {
	if len(d.spec.Processors) == 0 {
		return
	}
	if workflow.GetVersion(d.ctx, processorsChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return
	}
	for _, ps := range d.spec.Processors {
		p := &processor{spec: ps, reset: true}
		for _, c := range carried {
			if c.Name == ps.Name {
				p.counters = c.ProcessorCounters
				p.counters.InFlight = 0
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
		if p.leases > 0 || p.inflight > 0 || !p.dry || p.dryAt != d.frontierLeases {
			return false
		}
	}
	return true
}

// processorLeasing: a processor's lease call is outstanding.
func (d *dispatcher) processorLeasing() bool {
	for _, p := range d.procs {
		if p.leases > 0 {
			return true
		}
	}
	return false
}

// processorBacklog names a processor with max_pending pages waiting: the
// frontier waits for it.
func (d *dispatcher) processorBacklog() string {
	for _, p := range d.procs {
		if p.counters.Waiting >= p.spec.MaxPending {
			return p.spec.Name
		}
	}
	return ""
}

// deliver starts a lease for each processor with room in its window and,
// maybe, pages waiting.
func (d *dispatcher) deliver() {
	now := workflow.Now(d.ctx)
	for _, p := range d.procs {
		d.sendReady(p)
		if !d.payloadRoom() {
			d.nextTask()
			return
		}
		if p.dry && d.frontierSettled() && p.dryAt != d.frontierLeases {
			p.dry = false // the crawl looks done: one more look, after it
		}
		// Leases run side by side up to the window (the first of a run,
		// which resets what past runs held, alone).
		for !p.dry && p.leases+p.inflight < p.spec.Window && !now.Before(p.coolUntil) && (!p.reset || p.leases == 0) {
			if !d.payloadRoom() {
				d.nextTask()
				return
			}
			d.leaseFor(p)
		}
	}
}

// leaseFor leases the next batch for p. The lease is a regular activity:
// a local one would hold the workflow task open while it runs, and with a
// window of them always running, the batches they lease would wait for
// the task to end before they are sent.
func (d *dispatcher) leaseFor(p *processor) {
	p.leases++
	p.seq++
	started := d.frontierLeases
	req := campaign.DeliveryLeaseRequest{
		CampaignKey: d.key, CampaignID: d.id, Processor: p.spec.Name, Reset: p.reset,
		Lease: int64(d.run)<<32 | p.seq,
	}
	f := workflow.ExecuteActivity(workflow.WithActivityOptions(d.ctx, d.controlOptions()), campaign.LeaseDeliveriesActivity, req)
	d.sel.AddFuture(f, func(f workflow.Future) {
		p.leases--
		var lease campaign.DeliveryLease
		if err := f.Get(d.ctx, &lease); err != nil {
			d.log.Warn("leasing pages for a processor failed; trying again", "processor", p.spec.Name, "error", err)
			p.coolUntil = workflow.Now(d.ctx).Add(processorCooldown)
			d.wakeAt(processorCooldown)
			return
		}
		p.reset = false
		p.counters.Waiting = lease.Waiting
		if len(lease.IDs) == 0 {
			switch {
			case lease.Waiting == 0:
				p.dry, p.dryAt = true, started
			case p.leases == 0:
				// Pages wait but a lease beside this one held them: it
				// has ended, so look again shortly.
				p.coolUntil = workflow.Now(d.ctx).Add(time.Second)
				d.wakeAt(time.Second)
			}
			return
		}
		p.inflight++ // counted from now: it holds a place in the window
		p.ready = append(p.ready, lease)
		d.sendReady(p)
	})
}

// sendReady sends p's leased batches while the workflow task has room for
// their payloads; the rest go in a later task.
func (d *dispatcher) sendReady(p *processor) {
	for len(p.ready) > 0 {
		if !d.payloadRoom() {
			d.nextTask()
			return
		}
		lease := p.ready[0]
		p.ready = p.ready[1:]
		d.spend(leaseBytes(lease))
		d.process(p, lease)
	}
}

// process sends one batch to the processor's activity, then stores what
// it returned, or its failure once the retry policy gave up.
func (d *dispatcher) process(p *processor, lease campaign.DeliveryLease) {
	p.counters.InFlight += len(lease.IDs)
	p.counters.Batches++
	r := p.spec.Retry
	actx := workflow.WithActivityOptions(d.ctx, workflow.ActivityOptions{
		TaskQueue:           p.spec.TaskQueue,
		StartToCloseTimeout: p.spec.Timeout.D(),
		Summary:             fmt.Sprintf("%s: %d pages", p.spec.Name, len(lease.IDs)),
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: r.InitialInterval.D(), BackoffCoefficient: r.BackoffCoefficient,
			MaximumInterval: r.MaxInterval.D(), MaximumAttempts: int32(r.MaxAttempts),
		},
	})
	f := workflow.ExecuteActivity(actx, p.spec.Activity, lease.Request)
	d.sel.AddFuture(f, func(f workflow.Future) {
		var result campaign.ProcessResult
		err := f.Get(d.ctx, &result)
		var canceled *temporal.CanceledError
		if err != nil && (d.cancelled || errors.As(err, &canceled)) {
			// The campaign is being cancelled: the pages stay leased, and a
			// campaign started again under its ID delivers them again.
			p.inflight--
			p.counters.InFlight -= len(lease.IDs)
			return
		}
		req := campaign.StoreProcessedRequest{
			CampaignKey: d.key, CampaignID: d.id, Processor: p.spec.Name, IDs: lease.IDs,
		}
		if err != nil {
			req.Error = processorError(err)
		} else {
			req.Result = &result
			d.spend(resultBytes(result))
		}
		d.storeProcessed(p, req)
	})
}

// storeProcessed records a batch's results, in a regular activity for the
// reason leaseFor gives; it retries until Postgres takes them, and should
// it fail even so, tries again after processorCooldown. The run does not
// continue as new with results unstored (they are in d.ops).
func (d *dispatcher) storeProcessed(p *processor, req campaign.StoreProcessedRequest) {
	d.ops++
	f := workflow.ExecuteActivity(workflow.WithActivityOptions(d.ctx, d.controlOptions()), campaign.StoreProcessedActivity, req)
	d.sel.AddFuture(f, func(f workflow.Future) {
		var res campaign.StoreProcessedResult
		if err := f.Get(d.ctx, &res); err != nil {
			d.log.Warn("storing a processor's results failed; trying again", "processor", p.spec.Name, "error", err)
			d.sel.AddFuture(workflow.NewTimer(d.ctx, processorCooldown), func(workflow.Future) {
				d.ops--
				d.storeProcessed(p, req)
			})
			return
		}
		d.ops--
		p.inflight--
		p.counters.InFlight -= len(req.IDs)
		p.counters.Processed += int64(res.Processed)
		p.counters.Failed += int64(res.Failed)
		p.counters.Items += int64(res.Items)
		if req.Error != "" {
			p.counters.LastError = req.Error
		}
		d.counters.Discovered += int64(res.Discovered)
		if res.Discovered > 0 {
			d.leaseDry = false
		}
	})
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

// wakeAt wakes the loop after wait, once.
func (d *dispatcher) wakeAt(wait time.Duration) {
	d.sel.AddFuture(workflow.NewTimer(d.ctx, wait), func(workflow.Future) {})
}

// payloadRoom says whether the current workflow task has room for more
// processor payloads. A task is known by the history length at its start,
// which replay sees the same.
func (d *dispatcher) payloadRoom() bool {
	if at := workflow.GetInfo(d.ctx).GetCurrentHistoryLength(); at != d.taskAt {
		d.taskAt, d.taskBytes = at, 0
	}
	return d.taskBytes < taskPayloadBudget
}

func (d *dispatcher) spend(n int) {
	d.payloadRoom() // a new task starts from zero
	d.taskBytes += n
}

// nextTask makes sure the loop runs again in a later workflow task.
func (d *dispatcher) nextTask() {
	if d.taskTimer {
		return
	}
	d.taskTimer = true
	d.sel.AddFuture(workflow.NewTimer(d.ctx, time.Millisecond), func(workflow.Future) { d.taskTimer = false })
}

// leaseBytes is about what a lease weighs as a payload.
func leaseBytes(l campaign.DeliveryLease) int {
	n := 0
	for _, p := range l.Request.Pages {
		n += 512 + len(p.Body)*4/3 + len(p.URL) + len(p.FinalURL) // base64 bodies, headers
		for k, vs := range p.Headers {
			n += len(k)
			for _, v := range vs {
				n += len(v)
			}
		}
	}
	return n
}

// resultBytes is about what a processor's result weighs.
func resultBytes(r campaign.ProcessResult) int {
	n := 0
	for _, p := range r.Pages {
		n += 64 + len(p.Key) + len(p.Error)
		for _, it := range p.Items {
			n += len(it)
		}
		for _, l := range p.Links {
			n += len(l) + 3
		}
	}
	return n
}

// processorsHandedOn says whether the run may continue as new as far as
// its processors go: no batch in flight, or handOnWait spent waiting.
func (d *dispatcher) processorsHandedOn() bool {
	busy := false
	for _, p := range d.procs {
		d.sendReady(p) // leased already: sent, not abandoned
		busy = busy || p.inflight > 0
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
