package workflows

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/spiderpool/spiderpool/campaign"
)

// TestBatchHeldBesideLeasesWhenItsNeighbourEnds: two batches of a
// processor lease at once (the frontier counts 20 pages waiting for it);
// the first takes the 5 pages waiting, the second finds them counted but
// held. The processor leases again as soon as the first batch ends, not
// a second later: the 5 pages that were
// waiting beside it go out at once.
func TestBatchHeldBesideLeasesWhenItsNeighbourEnds(t *testing.T) {
	f := newFakeCluster(0, 0, alive("n1", 1))
	f.procWaiting = map[string]int{"p": 20}
	env := newEnv(t, f)
	var (
		mu     sync.Mutex
		leases []time.Time // workflow time of each lease
		stored int
	)
	heldBesideSeen := make(chan struct{}) // the batch that found the pages held has ended
	var once sync.Once
	env.SetOnChildWorkflowCompletedListener(func(_ *workflow.Info, result converter.EncodedValue, err error) {
		var res campaign.ProcessBatchResult
		if err == nil && result != nil && result.Get(&res) == nil && res.Pages == 0 && res.Waiting > 0 {
			once.Do(func() { close(heldBesideSeen) })
		}
	})
	page := func(id int64) campaign.ProcessPage { return campaign.ProcessPage{Key: fmt.Sprintf("c/%d", id)} }
	reg := func(fn any, name string) { env.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name}) }
	reg(func(_ context.Context, req campaign.DeliveryLeaseRequest) (campaign.DeliveryLease, error) {
		mu.Lock()
		defer mu.Unlock()
		leases = append(leases, env.Now())
		var l campaign.DeliveryLease
		switch len(leases) {
		case 1, 3: // the pages waiting
			first := int64(1 + 5*(len(leases)/3))
			for id := first; id < first+5; id++ {
				l.IDs = append(l.IDs, id)
				l.Request.Pages = append(l.Request.Pages, page(id))
			}
			l.Waiting = 5 * (1 - len(leases)/3)
		case 2: // the first lease holds the pages this one counted
			l.Waiting = 5
		}
		return l, nil
	}, campaign.LeaseDeliveriesActivity)
	reg(func(ctx context.Context, req campaign.ProcessRequest) (campaign.ProcessResult, error) {
		select { // the first batch is still at the processor when its neighbour ends
		case <-heldBesideSeen:
		case <-ctx.Done():
			return campaign.ProcessResult{}, ctx.Err()
		}
		return campaign.ProcessResult{}, nil
	}, "proc")
	reg(func(_ context.Context, req campaign.StoreProcessedRequest) (campaign.StoreProcessedResult, error) {
		mu.Lock()
		defer mu.Unlock()
		stored += len(req.IDs)
		return campaign.StoreProcessedResult{Processed: len(req.IDs)}, nil
	}, campaign.StoreProcessedActivity)

	spec := testSpec()
	spec.Processors = []campaign.Processor{{Name: "p", TaskQueue: "procs", Activity: "proc", BatchSize: 10, Window: 2}}
	run(t, env, spec)
	mu.Lock()
	defer mu.Unlock()
	if stored != 10 {
		t.Errorf("%d pages stored, want 10", stored)
	}
	if len(leases) < 3 {
		t.Fatalf("%d leases, want the pages held beside leased again", len(leases))
	}
	if wait := leases[2].Sub(leases[1]); wait >= time.Second {
		t.Errorf("the pages held beside a batch were leased again %s after, want as soon as that batch ended", wait)
	}
}

// TestProcessorStartsTheBatchesItsPagesFill: a processor starts one batch
// when none is out, and beside batches out only as many as the pages
// counted waiting and not yet sent for fill, as far as its window has
// room.
func TestProcessorStartsTheBatchesItsPagesFill(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, c := range []struct {
		name               string
		batches, unclaimed int
		dry, held, cooling bool
		want               int
	}{
		{name: "none out, nothing counted: a look", want: 1},
		{name: "none out, 25 counted", unclaimed: 25, want: 3},
		{name: "none out, more than the window takes", unclaimed: 100, want: 4},
		{name: "one out, its pages all sent for", batches: 1, unclaimed: -10, want: 0},
		{name: "one out, 15 more counted", batches: 1, unclaimed: 15, want: 2},
		{name: "two out, room for two", batches: 2, unclaimed: 100, want: 2},
		{name: "none out, more sent for than counted: a look", unclaimed: -5, want: 1},
		{name: "dry", dry: true, unclaimed: 100, want: 0},
		{name: "held beside", held: true, batches: 1, unclaimed: 100, want: 0},
		{name: "cooling", cooling: true, unclaimed: 100, want: 0},
	} {
		p := &processor{spec: campaign.Processor{BatchSize: 10, Window: 4}, batches: c.batches, unclaimed: c.unclaimed,
			dry: c.dry, heldBeside: c.held}
		if c.cooling {
			p.coolUntil = now.Add(time.Second)
		}
		if got := p.batchesToStart(now); got != c.want {
			t.Errorf("%s: %d batches started, want %d", c.name, got, c.want)
		}
	}
}

// TestBacklogCountsOnlyPagesNoBatchWasStartedFor: a count of 2,001
// pages waiting holds the frontier back (max_pending 2,000) until
// batches are started for them: the three batches of 1,000 a count
// starts take its pages, and the frontier goes on at once.
func TestBacklogCountsOnlyPagesNoBatchWasStartedFor(t *testing.T) {
	p := &processor{spec: campaign.Processor{Name: "p", BatchSize: 1000, Window: 8, MaxPending: 2000}}
	p.counted(2001)
	d := &dispatcher{procs: []*processor{p}}
	if got := d.processorBacklog(); got != "p" {
		t.Errorf("2,001 pages counted: backlog %q, want p", got)
	}
	n := p.batchesToStart(time.Unix(1000, 0))
	for range n {
		p.began()
	}
	if got := d.processorBacklog(); got != "" {
		t.Errorf("%d batches started: backlog %q, want none", n, got)
	}
}

// TestProcessorsKeepTheirPagesInChunks: a campaign with processors asks
// its nodes to keep its pages for them in chunks, and starts its
// ProcessBatch children under the name only nodes that read chunks know,
// at every processors version this code runs; an older one is retired.
func TestProcessorsKeepTheirPagesInChunks(t *testing.T) {
	for _, v := range []workflow.Version{maxProcessorsVersion, minProcessorsVersion, minProcessorsVersion - 1} {
		f := newFakeCluster(2, 3, alive("n1", 1))
		env := newEnv(t, f)
		env.OnGetVersion(processorsChange, workflow.DefaultVersion, maxProcessorsVersion).Return(v)
		var mu sync.Mutex
		children := map[string]int{}
		env.SetOnChildWorkflowStartedListener(func(info *workflow.Info, _ workflow.Context, _ converter.EncodedValues) {
			mu.Lock()
			defer mu.Unlock()
			children[info.WorkflowType.Name]++
		})
		reg := func(fn any, name string) { env.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name}) }
		reg(func(context.Context, campaign.DeliveryLeaseRequest) (campaign.DeliveryLease, error) {
			return campaign.DeliveryLease{}, nil
		}, campaign.LeaseDeliveriesActivity)
		spec := testSpec()
		spec.Processors = []campaign.Processor{{Name: "p", TaskQueue: "procs", Activity: "proc", BatchSize: 10, Window: 2}}
		if v < minProcessorsVersion {
			env.ExecuteWorkflow(campaign.WorkflowType, spec)
			var panicErr *temporal.PanicError
			if err := env.GetWorkflowError(); !errors.As(err, &panicErr) {
				t.Errorf("version %d: error %v, want the workflow task to fail", v, err)
			}
			continue
		}
		run(t, env, spec)
		f.mu.Lock()
		var chunked, plain int
		for _, l := range f.leases {
			if l.Assign != nil && l.Assign.BodyChunks {
				chunked++
			} else {
				plain++
			}
		}
		f.mu.Unlock()
		if chunked == 0 || plain > 0 {
			t.Errorf("version %d: %d leases asked for chunks, %d not; want all", v, chunked, plain)
		}
		mu.Lock()
		if len(children) != 1 || children[campaign.ChunkedBatchWorkflowType] == 0 {
			t.Errorf("version %d: children started %v, want all %s", v, children, campaign.ChunkedBatchWorkflowType)
		}
		mu.Unlock()
	}
}

// TestDryProcessorLeasesWhenAFrontierLeaseCountsItsPages: a processor
// whose last batch found nothing waits for news of pages. In a pool run a
// frontier lease that counts pages waiting for it is such news: the
// processor leases them before the next look at the figures, and the
// frontier (held back by max_pending) does not wait for that look.
func TestDryProcessorLeasesWhenAFrontierLeaseCountsItsPages(t *testing.T) {
	f := newFakeCluster(20, 10, alive("n1", 1))
	env := newEnv(t, f)
	type event struct {
		lease   bool // a frontier lease (else a processor's lease)
		counted int  // pages the frontier lease counted waiting
		looks   int  // looks at the figures before it
	}
	var events []event
	f.leaseGate = func(campaign.LeaseHostsRequest) {
		f.mu.Lock()
		defer f.mu.Unlock()
		events = append(events, event{lease: true, counted: f.procWaiting["p"], looks: len(f.progress)})
	}
	waiting := -1 // pages waiting for p; -1 until its first batch found none
	env.SetOnChildWorkflowCompletedListener(func(*workflow.Info, converter.EncodedValue, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if waiting < 0 { // the processor is dry; from now on the frontier counts 20 pages for it
			waiting = 20
			f.procWaiting = map[string]int{"p": waiting}
		}
	})
	page := func(id int) campaign.ProcessPage { return campaign.ProcessPage{Key: fmt.Sprintf("c/%d", id)} }
	reg := func(fn any, name string) { env.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name}) }
	reg(func(_ context.Context, req campaign.DeliveryLeaseRequest) (campaign.DeliveryLease, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		events = append(events, event{looks: len(f.progress)})
		var l campaign.DeliveryLease
		for range min(max(waiting, 0), 10) {
			l.IDs = append(l.IDs, int64(waiting))
			l.Request.Pages = append(l.Request.Pages, page(waiting))
			waiting--
		}
		if waiting >= 0 {
			l.Waiting = waiting
			f.procWaiting = map[string]int{"p": waiting}
		}
		return l, nil
	}, campaign.LeaseDeliveriesActivity)
	reg(func(context.Context, campaign.ProcessRequest) (campaign.ProcessResult, error) {
		return campaign.ProcessResult{}, nil
	}, "proc")
	reg(func(_ context.Context, req campaign.StoreProcessedRequest) (campaign.StoreProcessedResult, error) {
		return campaign.StoreProcessedResult{Processed: len(req.IDs)}, nil
	}, campaign.StoreProcessedActivity)

	spec := testSpec()
	spec.Processors = []campaign.Processor{{Name: "p", TaskQueue: "procs", Activity: "proc", BatchSize: 10, Window: 2, MaxPending: 20}}
	run(t, env, spec)
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, e := range events {
		if !e.lease || e.counted == 0 {
			continue
		}
		for _, next := range events[i+1:] {
			if !next.lease {
				if next.looks > e.looks {
					t.Errorf("the processor leased after %d looks at the figures, want none after the lease that counted its %d pages", next.looks-e.looks, e.counted)
				}
				return
			}
		}
		t.Fatalf("no processor lease after a frontier lease counted %d pages waiting", e.counted)
	}
	t.Fatal("no frontier lease counted pages waiting for the processor")
}

// TestACountOfABatchWaitingEndsAProcessorsWait: a frontier lease that
// counts a batch's worth of pages waiting for a processor starts a batch
// for it whatever it was waiting on (a look that found nothing, a linger
// to fill its next batch, or the batches beside one that found the pages
// held); fewer pages wake only one that found nothing. Runs from before
// processors version 10 keep waiting.
func TestACountOfABatchWaitingEndsAProcessorsWait(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, c := range []struct {
		name                string
		dry, lingering      bool
		held                bool
		counted, v10, batch int // batch: batches out
		want                int
	}{
		{name: "dry, a batch counted", dry: true, counted: 10, v10: 1, want: 1},
		{name: "dry, a page counted", dry: true, counted: 1, v10: 1, want: 1},
		{name: "lingering, a batch counted", lingering: true, counted: 10, v10: 1, batch: 1, want: 1},
		{name: "lingering, a page counted", lingering: true, counted: 1, v10: 1, batch: 1, want: 0},
		{name: "held beside, a batch counted", held: true, counted: 10, v10: 1, batch: 1, want: 1},
		{name: "held beside, a page counted", held: true, counted: 1, v10: 1, batch: 1, want: 0},
		{name: "dry, a batch counted, version 9", dry: true, counted: 10},
		{name: "lingering, a batch counted, version 9", lingering: true, counted: 10, batch: 1},
		{name: "held beside, a batch counted, version 9", held: true, counted: 10, batch: 1},
	} {
		p := &processor{spec: campaign.Processor{Name: "p", BatchSize: 10, Window: 4}, dry: c.dry, heldBeside: c.held, batches: c.batch}
		if c.lingering {
			p.lingerUntil = now.Add(processorLinger)
		}
		d := &dispatcher{procs: []*processor{p}, countWakesProcessors: c.v10 == 1}
		d.processorsWaiting(map[string]int{"p": c.counted})
		got := 0
		if !now.Before(p.lingerUntil) {
			got = p.batchesToStart(now)
		}
		if got != c.want {
			t.Errorf("%s: %d batches started, want %d", c.name, got, c.want)
		}
	}
}
