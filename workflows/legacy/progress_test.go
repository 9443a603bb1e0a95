package legacy

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/temporal"

	"github.com/spiderpool/spiderpool/campaign"
)

// upserts records what the workflow upserts, in order.
type upserts struct {
	mu       sync.Mutex
	statuses []string
	fetched  int64
	failed   int64
	calls    int
}

func (u *upserts) record(args mock.Arguments) {
	u.mu.Lock()
	defer u.mu.Unlock()
	sa := args.Get(0).(temporal.SearchAttributes)
	u.calls++
	if v, ok := sa.GetKeyword(temporal.NewSearchAttributeKeyKeyword(campaign.AttrStatus)); ok {
		if n := len(u.statuses); n == 0 || u.statuses[n-1] != v {
			u.statuses = append(u.statuses, v)
		}
	}
	if v, ok := sa.GetInt64(temporal.NewSearchAttributeKeyInt64(campaign.AttrFetched)); ok {
		u.fetched = v
	}
	if v, ok := sa.GetInt64(temporal.NewSearchAttributeKeyInt64(campaign.AttrFailed)); ok {
		u.failed = v
	}
}

func TestSearchAttributesFollowTheCampaign(t *testing.T) {
	f := newFakeCluster(8, 5, alive("a", 1), alive("b", 1))
	f.attrs = []string{campaign.AttrFailed, campaign.AttrFetched, campaign.AttrStatus}
	f.holdAfter = 20
	env := newEnv(t, f)
	var u upserts
	env.OnUpsertTypedSearchAttributes(mock.Anything).Run(u.record).Return(nil)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(campaign.Pause, nil) }, 300*time.Millisecond)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(campaign.Resume, nil)
		f.release()
	}, 20*time.Second)
	sum := run(t, env, testSpec())

	want := []string{campaign.StatusRunning, campaign.StatusPaused, campaign.StatusRunning, campaign.StatusCompleted}
	if len(u.statuses) != len(want) {
		t.Fatalf("CampaignStatus went %v, want %v", u.statuses, want)
	}
	for i := range want {
		if u.statuses[i] != want[i] {
			t.Fatalf("CampaignStatus went %v, want %v", u.statuses, want)
		}
	}
	if u.fetched != sum.Fetched || sum.Fetched != 40 {
		t.Errorf("PagesFetched ended at %d, summary says %d of 40", u.fetched, sum.Fetched)
	}
	// Counters move with every batch, but upserts are spaced: a handful,
	// not one per batch.
	if u.calls > len(want)+4 {
		t.Errorf("%d upserts for %d batches; counters should be spaced by %v", u.calls, len(f.fetches), attrEvery)
	}
}

func TestNoSearchAttributesUpsertedWhenNotRegistered(t *testing.T) {
	f := newFakeCluster(4, 5, alive("a", 1))
	env := newEnv(t, f)
	var u upserts
	env.OnUpsertTypedSearchAttributes(mock.Anything).Run(u.record).Return(nil)
	run(t, env, testSpec())
	if u.calls != 0 {
		t.Fatalf("%d upserts on a namespace without the attributes: each would fail the workflow task", u.calls)
	}
}
