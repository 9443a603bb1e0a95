package workflows

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/workflow"

	"github.com/spiderpool/spiderpool/campaign"
)

// TestBatchHeldBesideLeasesWhenItsNeighbourEnds: two batches of a
// processor lease at once; the first takes the 5 pages waiting, the
// second finds them counted but held. The processor leases again as soon
// as the first batch ends (processors version 6), not a second later:
// the 5 pages that were waiting beside it go out at once.
func TestBatchHeldBesideLeasesWhenItsNeighbourEnds(t *testing.T) {
	f := newFakeCluster(0, 0, alive("n1", 1))
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
