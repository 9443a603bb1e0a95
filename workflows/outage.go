package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/spiderpool/spiderpool/campaign"
)

// Control calls (lease, membership, releases, ring-change writes) are local
// activities against Postgres, and while Postgres is away every retry of
// every one of them would be history: each call makes one attempt and,
// after a failure, that kind of call is held back (see outage).
// Control call timing.
const (
	// controlCallTimeout bounds one attempt of a control call: a lease on a
	// large frontier may take seconds, a hung connection must not take
	// longer than this.
	controlCallTimeout = time.Minute
	// controlRetryFirst and controlRetryMax bound the wait after a failed
	// control call; it doubles with each failure in a row. In an outage
	// every kind of call fails in the same workflow task, so their waits
	// end together and one timer wakes them: at the maximum, a minute of
	// outage costs that timer and its workflow task (5 events) and a
	// marker per kind of call (lease, membership, one release, one
	// ring-change write): under 10 events, some 500 an hour. The campaign
	// goes on within a minute of Postgres coming back.
	controlRetryFirst = time.Second
	controlRetryMax   = time.Minute
)

// controlCall names a kind of control call, each with its own backoff: a
// call that fails alone (a lease query too slow, say) waits without
// holding the others back.
type controlCall int

const (
	callLease controlCall = iota
	callMembership
	callRelease
	callChanges
	callProgress
	controlCalls
)

var controlCallNames = [controlCalls]string{"lease", "membership refresh", "release", "record ring changes", "read progress"}

// backoff is one kind of call's failures.
type backoff struct {
	failures int           // in a row
	wait     time.Duration // after the last failure
	retryAt  time.Time     // no call before this while failures > 0
}

// outage is what the dispatcher knows of failing control calls.
type outage struct {
	calls    [controlCalls]backoff
	timerSet bool // a timer wakes the loop when a wait ends
	// membershipDue: a refresh failed, or fell due while held back; it is
	// made again when its wait is over, not by the refresh timer.
	membershipDue bool
	// releases that failed, or fell due while held back. Dropped at
	// continue-as-new: their leases expire instead (Dispatch.LeaseTTL).
	releases  []campaign.ReleaseRequest
	releasing int // releases outstanding
}

// holdingBack says whether calls of kind k wait.
func (d *dispatcher) holdingBack(k controlCall) bool {
	b := d.out.calls[k]
	return b.failures > 0 && workflow.Now(d.ctx).Before(b.retryAt)
}

// controlFailed notes a failed call of kind k and returns how long such
// calls now wait. Calls of a kind failing while it waits already (releases
// made together) count once: the wait grows with the outage, not with the
// number of calls.
func (d *dispatcher) controlFailed(k controlCall, err error) time.Duration {
	now := workflow.Now(d.ctx)
	b := &d.out.calls[k]
	if now.Before(b.retryAt) {
		return b.retryAt.Sub(now)
	}
	b.failures++
	wait := controlRetryMax
	if b.failures < 8 { // 1s << 7 is past the maximum
		wait = min(controlRetryFirst<<(b.failures-1), controlRetryMax)
	}
	b.wait, b.retryAt = wait, now.Add(wait)
	d.log.Warn("control call failed; calls of its kind wait", "call", controlCallNames[k], "error", err,
		"failures", b.failures, "retry_in", wait)
	return wait
}

// alignWaits ends now the waits that have less than half their length
// to go. Calls that failed at slightly different times (a release when
// its batch failed, the lease at its next turn) then fail together at the
// next try and wait alike after it: through an outage one timer wakes them
// all, rather than one timer each.
func (d *dispatcher) alignWaits() {
	now := workflow.Now(d.ctx)
	for k := range controlCalls {
		if b := &d.out.calls[k]; b.failures > 0 && b.retryAt.Sub(now) <= b.wait/2 {
			b.retryAt = now
		}
	}
}

// controlSucceeded ends the failures of kind k: its next failure waits
// controlRetryFirst.
func (d *dispatcher) controlSucceeded(k controlCall) {
	b := &d.out.calls[k]
	if b.failures > 0 {
		d.log.Info("control call succeeds again", "call", controlCallNames[k], "failures", b.failures)
	}
	b.failures = 0
}

// retryControl makes the calls held back whose wait is over, and arms the
// one timer that ends the next wait.
func (d *dispatcher) retryControl() {
	var next time.Time
	for k := range controlCalls {
		if b := d.out.calls[k]; d.holdingBack(k) && (next.IsZero() || b.retryAt.Before(next)) {
			next = b.retryAt
		}
	}
	if !next.IsZero() && !d.out.timerSet {
		d.out.timerSet = true
		d.sel.AddFuture(workflow.NewTimer(d.ctx, next.Sub(workflow.Now(d.ctx))), func(workflow.Future) {
			d.out.timerSet = false
			d.leaseDry = false // a lease held back is due again
			d.alignWaits()
		})
	}
	if d.out.membershipDue && !d.holdingBack(callMembership) {
		d.out.membershipDue = false
		d.refreshMembership()
	}
	if len(d.out.releases) == 0 || d.holdingBack(callRelease) {
		return
	}
	releases := d.out.releases
	if d.out.calls[callRelease].failures > 0 {
		// One tries whether Postgres is back; the rest follow it.
		if d.out.releasing > 0 {
			return
		}
		releases, d.out.releases = releases[:1], releases[1:]
	} else {
		d.out.releases = nil
	}
	for _, r := range releases {
		d.releaseWith(r, "retried after a failure")
	}
}

// localOptions are the options of the control calls' local activities.
func (d *dispatcher) localOptions() workflow.Context {
	return workflow.WithLocalActivityOptions(d.ctx, d.localActivityOptions())
}

func (d *dispatcher) localActivityOptions() workflow.LocalActivityOptions {
	return workflow.LocalActivityOptions{
		ScheduleToCloseTimeout: controlCallTimeout,
		StartToCloseTimeout:    controlCallTimeout,
		// One attempt: a failure holds every control call back (see
		// outage), which costs less history than retries per call.
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1},
	}
}
