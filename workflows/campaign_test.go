package workflows

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/ring"
)

// fakeCluster stands in for the activities: an in-memory frontier of
// shard-keyed URLs, leased host by host with a quota in flight, and a
// registry of nodes. It records what the workflow asked for, so tests
// check routing and flow control, not implementation details.
type fakeCluster struct {
	mu       sync.Mutex
	nodes    []campaign.NodeInfo
	hosts    []string           // shard keys, in lease order
	pending  map[string][]int64 // per host
	keyOf    map[int64]string
	inflight map[string]int // per host: leased, not yet settled
	batches  map[string]int // per node: produced, not yet completed
	leaseID  int64
	fetched  int64
	fetches  []fetchCall
	leases   []campaign.LeaseHostsRequest
	// leasedAfter are the lease requests made once release was called.
	leasedAfter []campaign.LeaseHostsRequest
	changes     []campaign.RingChange
	finished    *campaign.FinishRequest
	// window is the spec's window_per_node, to check against.
	window     int
	overWindow []string
	// holdAfter, when > 0, stops leasing after that many URLs (answering
	// "pending, due in a second") until release is called: a point in the
	// middle of a campaign where a test acts, in workflow time.
	holdAfter int
	// procWaiting is what each lease counts waiting per processor.
	procWaiting map[string]int
	leased      int
	released    bool
	// latency is each node's ms per request (default 10).
	latency map[string]int64
	attrs   []string
	// done are the URLs fetched, and perNode counts them by node: what
	// Postgres knows, whatever the batches reported.
	done    map[int64]bool
	perNode map[string]int64
	// now is the workflow clock (env.Now), for outages; with it, leases
	// expire after their TTL, as in Postgres.
	now     func() time.Time
	expires map[int64]time.Time
	// outageAt, when > 0, starts an outage of outageFor at that fetch: it
	// and every control call and fetch until the outage ends fail, as
	// they do while Postgres is down.
	outageAt             int
	outageFor            time.Duration
	outageFrom, outageTo time.Time
	// resumedAt is when the first lease after the outage succeeded.
	resumedAt time.Time
	// leaseGate, if set, runs before each lease is answered; onChanges
	// sees each ring-change write (f.mu is held).
	leaseGate func(campaign.LeaseHostsRequest)
	onChanges func([]campaign.RingChange)

	// Pool runs: queued are the batches routed into "Postgres" and not yet
	// fetched; figures each node's figures there. A node fetches its
	// queued batches at the next call the workflow makes, unless it is
	// dead or stalled. progress counts the looks at the figures, and
	// nodeReleases the hand-backs of nodes' batches.
	queued       []queuedBatch
	figures      map[string]*campaign.NodeFigures
	stalled      map[string]bool
	progress     []campaign.ProgressRequest
	progressSize []int
	nodeReleases []campaign.ReleaseNodeBatchesRequest
	memberships  [][]campaign.NodeInfo
}

// queuedBatch is a pool run's batch in the fake node_batches.
type queuedBatch struct {
	lease int64
	node  string
	ids   []int64
}

var errPostgresDown = errors.New("dial tcp 127.0.0.1:5432: connect: connection refused")

// unreachable fails a call made during the outage; f.mu is held.
func (f *fakeCluster) unreachable() error {
	if f.now == nil || f.outageFrom.IsZero() {
		return nil
	}
	if now := f.now(); !now.Before(f.outageFrom) && now.Before(f.outageTo) {
		return errPostgresDown
	}
	return nil
}

const quotaPerHost = 2

type fetchCall struct {
	node string
	ids  []int64
	ok   bool
}

func newFakeCluster(hosts, perHost int, nodes ...campaign.NodeInfo) *fakeCluster {
	f := &fakeCluster{
		nodes: nodes, pending: map[string][]int64{}, keyOf: map[int64]string{},
		inflight: map[string]int{}, batches: map[string]int{}, window: 2,
		done: map[int64]bool{}, perNode: map[string]int64{}, expires: map[int64]time.Time{},
	}
	id := int64(0)
	for h := range hosts {
		key := fmt.Sprintf("host-%d.test", h)
		f.hosts = append(f.hosts, key)
		for range perHost {
			id++
			f.pending[key] = append(f.pending[key], id)
			f.keyOf[id] = key
		}
	}
	return f
}

func (f *fakeCluster) release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = true
}

func (f *fakeCluster) lease(req campaign.LeaseHostsRequest) campaign.HostLease {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.leases = append(f.leases, req)
	if f.released {
		f.leasedAfter = append(f.leasedAfter, req)
	}
	f.leaseID++
	lease := campaign.HostLease{LeaseID: f.leaseID, ProcessorsWaiting: f.procWaiting}
	f.expire()
	left := 0
	for _, q := range f.pending {
		left += len(q)
	}
	held := f.holdAfter > 0 && f.leased >= f.holdAfter && !f.released
	if held || left == 0 {
		lease.Pending = int64(left)
		for _, n := range f.inflight {
			lease.LeasedElsewhere += int64(n)
		}
		if held {
			lease.NextDue = campaign.Duration(time.Second)
		}
		return lease
	}
	var members []ring.Node
	room := map[string]int{}
	for _, n := range req.Nodes {
		if req.Assign != nil {
			// The lease counts a node's room itself, and routes to live
			// nodes only (store.poolRooms).
			if !f.aliveLocked(n.ID) {
				continue
			}
			n.Batches = max(0, req.Assign.Window-f.batches[n.ID])
		}
		members = append(members, ring.Node{ID: n.ID, Weight: n.Weight})
		room[n.ID] = n.Batches
		if f.batches[n.ID]+n.Batches > f.window {
			f.overWindow = append(f.overWindow, fmt.Sprintf("%s: %d in flight, room %d asked", n.ID, f.batches[n.ID], n.Batches))
		}
	}
	r := ring.New(members...)
	byNode := map[string]*campaign.NodeBatch{}
	for _, key := range f.hosts {
		owner, ok := r.Lookup(key)
		if !ok || room[owner] == 0 || f.inflight[key] >= quotaPerHost {
			continue
		}
		b := byNode[owner]
		if b == nil {
			b = &campaign.NodeBatch{Node: owner}
			byNode[owner] = b
		}
		if b.Size() >= req.BatchSize {
			continue
		}
		q := f.pending[key]
		take := min(len(q), quotaPerHost-f.inflight[key], req.BatchSize-b.Size())
		if f.holdAfter > 0 && !f.released {
			take = min(take, f.holdAfter-f.leased)
		}
		if take <= 0 {
			continue
		}
		b.Groups = append(b.Groups, campaign.LeaseGroup{ShardKey: key, IDs: slices.Clone(q[:take])})
		if f.now != nil {
			for _, id := range q[:take] {
				f.expires[id] = f.now().Add(req.TTL.D())
			}
		}
		f.pending[key] = q[take:]
		f.inflight[key] += take
		f.leased += take
	}
	for _, n := range req.Nodes {
		if b := byNode[n.ID]; b != nil && b.Size() > 0 {
			lease.Batches = append(lease.Batches, *b)
			f.batches[n.ID]++
		}
	}
	if req.Assign != nil {
		f.route(&lease)
	}
	if lease.Size() == 0 && lease.Routed.URLs == 0 {
		lease.Pending = int64(left)
		lease.NextDue = campaign.Duration(100 * time.Millisecond)
		for _, n := range f.inflight {
			lease.LeasedElsewhere += int64(n)
		}
	}
	return lease
}

// expire returns URLs whose lease expired to pending; f.mu is held.
func (f *fakeCluster) expire() {
	if f.now == nil {
		return
	}
	now := f.now()
	for _, id := range slices.Sorted(maps.Keys(f.expires)) {
		if !now.Before(f.expires[id]) {
			delete(f.expires, id)
			key := f.keyOf[id]
			f.inflight[key]--
			f.pending[key] = append(f.pending[key], id)
		}
	}
}

// settle marks a batch's URLs done (or, back, returned to pending).
func (f *fakeCluster) settle(node string, ids []int64, back bool) {
	f.batches[node]--
	for _, id := range ids {
		if _, ok := f.expires[id]; !ok && f.now != nil {
			continue // its lease expired: not the batch's any more
		}
		delete(f.expires, id)
		key := f.keyOf[id]
		f.inflight[key]--
		if back {
			f.pending[key] = append(f.pending[key], id)
		} else {
			f.fetched++
			f.done[id] = true
			f.perNode[node]++
		}
	}
}

func (f *fakeCluster) register(env *testsuite.TestWorkflowEnvironment) {
	reg := func(fn any, name string) { env.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name}) }
	reg(func(_ context.Context, req campaign.StartRequest) (campaign.StartResult, error) {
		return campaign.StartResult{CampaignKey: 42, SeedsInserted: len(req.Spec.Seeds), SearchAttributes: f.attrs}, nil
	}, campaign.StartCampaignActivity)
	reg(func(_ context.Context, req campaign.LeaseHostsRequest) (campaign.HostLease, error) {
		if f.leaseGate != nil {
			f.leaseGate(req)
		}
		f.mu.Lock()
		err := f.unreachable()
		if err == nil && !f.outageTo.IsZero() && f.resumedAt.IsZero() {
			f.resumedAt = f.now()
		}
		f.mu.Unlock()
		if err != nil {
			return campaign.HostLease{}, err
		}
		f.pull()
		return f.lease(req), nil
	}, campaign.LeaseHostsActivity)
	reg(func(context.Context, campaign.ReleaseRequest) (int, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if err := f.unreachable(); err != nil {
			return 0, err
		}
		return 0, nil // runs release only the leases of a v0.10.0 run's batches, which no test carries
	}, campaign.ReleaseBatchActivity)
	reg(func(_ context.Context, req campaign.MembershipRequest) ([]campaign.NodeInfo, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if err := f.unreachable(); err != nil {
			return nil, err
		}
		var registry []campaign.NodeInfo
		for _, n := range f.nodes {
			n.Capabilities = []string{campaign.CapPull}
			registry = append(registry, n)
		}
		answer := campaign.MembershipChanges(registry, req.Known)
		f.memberships = append(f.memberships, answer)
		return answer, nil
	}, campaign.RefreshMembershipActivity)
	reg(func(_ context.Context, req campaign.RecordRingChangesRequest) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		if err := f.unreachable(); err != nil {
			return err
		}
		f.changes = append(f.changes, req.Changes...)
		if f.onChanges != nil {
			f.onChanges(req.Changes)
		}
		return nil
	}, campaign.RecordRingChangesActivity)
	reg(func(_ context.Context, req campaign.FinishRequest) (campaign.Summary, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if err := f.unreachable(); err != nil {
			return campaign.Summary{}, err
		}
		f.finished = &req
		return campaign.Summary{Outcome: req.Outcome, Fetched: f.fetched, PerNode: maps.Clone(f.perNode)}, nil
	}, campaign.FinishCampaignActivity)
	f.registerPool(env)
}

func alive(id string, w float64) campaign.NodeInfo {
	return campaign.NodeInfo{ID: id, Weight: w, Alive: true, Incarnation: id + "-1"}
}

// newEnv runs the campaign as a new run does.
func newEnv(t *testing.T, f *fakeCluster) *testsuite.TestWorkflowEnvironment {
	return newEnvAt(t, f, poolRuns)
}

// newEnvAt runs the campaign at version v of hostFlowChange.
func newEnvAt(t *testing.T, f *fakeCluster, v workflow.Version) *testsuite.TestWorkflowEnvironment {
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(tlog.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	env := suite.NewTestWorkflowEnvironment()
	env.SetTestTimeout(30 * time.Second)
	Register(env)
	f.register(env)
	env.OnGetVersion(hostFlowChange, workflow.DefaultVersion, poolRuns).Return(v)
	return env
}

func testSpec() campaign.Spec {
	return campaign.Spec{Seeds: []string{"http://host-0.test/"}, Dispatch: campaign.Dispatch{BatchSize: 10, WindowPerNode: 2}}
}

func run(t *testing.T, env *testsuite.TestWorkflowEnvironment, spec campaign.Spec) campaign.Summary {
	t.Helper()
	env.ExecuteWorkflow(campaign.WorkflowType, spec)
	if !env.IsWorkflowCompleted() {
		t.Fatal("workflow did not complete")
	}
	if err := env.GetWorkflowError(); err != nil {
		t.Fatalf("workflow failed: %v", err)
	}
	var sum campaign.Summary
	if err := env.GetWorkflowResult(&sum); err != nil {
		t.Fatal(err)
	}
	return sum
}

// offeredTo says whether any of the lease requests offered node room.
func offeredTo(reqs []campaign.LeaseHostsRequest, node string) bool {
	for _, r := range reqs {
		for _, n := range r.Nodes {
			if n.ID == node {
				return true
			}
		}
	}
	return false
}

// midCampaignFor runs act at a point where the campaign has leased
// holdAfter URLs and waits for more, and lets it go on after hold.
func midCampaignFor(env *testsuite.TestWorkflowEnvironment, f *fakeCluster, hold time.Duration, act func()) {
	env.RegisterDelayedCallback(func() {
		act()
		env.RegisterDelayedCallback(f.release, hold)
	}, 500*time.Millisecond)
}

func countFor(calls []fetchCall, node string) int64 {
	n := int64(0)
	for _, c := range calls {
		if c.node == node {
			n++
		}
	}
	return n
}

// TestRunsOlderThanTheSupportWindowWaitForTheirRelease: a run whose
// history predates pool runs (a v0.10.0 run, or a v0.1.0 one) is not run
// by this code: its workflow task fails, saying what to do, and it does
// not fail the campaign or touch Postgres.
func TestRunsOlderThanTheSupportWindowWaitForTheirRelease(t *testing.T) {
	for _, v := range []workflow.Version{workflow.DefaultVersion, 1} {
		f := newFakeCluster(1, 1, alive("a", 1))
		env := newEnvAt(t, f, v)
		env.ExecuteWorkflow(campaign.WorkflowType, testSpec())
		var panicErr *temporal.PanicError
		if err := env.GetWorkflowError(); !errors.As(err, &panicErr) || !strings.Contains(panicErr.Error(), "docs/upgrading.md") {
			t.Fatalf("version %d: error %v, want the workflow task to fail naming docs/upgrading.md", v, err)
		}
		if len(f.leases) != 0 {
			t.Fatalf("version %d: %d leases, want none", v, len(f.leases))
		}
	}
}

type updateCallbacks struct {
	rejected error
	result   campaign.NodeStatus
}

func (u *updateCallbacks) Accept()          {}
func (u *updateCallbacks) Reject(err error) { u.rejected = err }
func (u *updateCallbacks) Complete(v any, err error) {
	if ns, ok := v.(campaign.NodeStatus); ok {
		u.result = ns
	}
	if err != nil {
		u.rejected = err
	}
}

func TestUnknownNodeIsRejectedAndCampaignUnharmed(t *testing.T) {
	f := newFakeCluster(3, 3, alive("a", 1))
	f.holdAfter = 3
	env := newEnv(t, f)
	ghost := &updateCallbacks{}
	var status campaign.Status
	midCampaignFor(env, f, 100*time.Millisecond, func() {
		env.UpdateWorkflow(campaign.Reweight, "rw", ghost, campaign.ReweightRequest{Node: "ghost", Weight: new(2.0)})
		env.SignalWorkflow(campaign.Drain, campaign.NodeRequest{Node: "ghost"})
		env.RegisterDelayedCallback(func() {
			v, err := env.QueryWorkflow(campaign.StatusQuery)
			if err == nil {
				err = v.Get(&status)
			}
			if err != nil {
				t.Error(err)
			}
		}, 50*time.Millisecond)
	})
	sum := run(t, env, testSpec())
	if ghost.rejected == nil || !strings.Contains(ghost.rejected.Error(), `node: unknown node "ghost"`) {
		t.Errorf("unknown node update: %v", ghost.rejected)
	}
	if len(status.Rejected) != 1 || !strings.Contains(status.Rejected[0], `unknown node "ghost"`) {
		t.Errorf("status.rejected = %q, want the drain signal", status.Rejected)
	}
	if sum.Fetched != 9 || status.Nodes[0].State != campaign.NodeActive {
		t.Errorf("campaign harmed: fetched %d of 9, node %+v", sum.Fetched, status.Nodes)
	}
}

func TestInvalidSpecFailsNamingTheField(t *testing.T) {
	f := newFakeCluster(1, 1, alive("a", 1))
	env := newEnv(t, f)
	env.ExecuteWorkflow(campaign.WorkflowType, campaign.Spec{Limits: campaign.Limits{MaxPages: -1}})
	err := env.GetWorkflowError()
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != "InvalidSpec" || !appErr.NonRetryable() {
		t.Fatalf("error %v, want a non-retryable InvalidSpec", err)
	}
	for _, field := range []string{"spec.seeds", "spec.limits.max_pages"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("error %q does not name %s", err, field)
		}
	}
}

// TestMaxPagesEndsWithRestExcluded: the campaign ends at its page budget
// only when nothing but URLs it would not admit is left.
func TestMaxPagesEndsWithRestExcluded(t *testing.T) {
	f := newFakeCluster(2, 2, alive("a", 1))
	env := newEnv(t, f)
	env.OnActivity(campaign.LeaseHostsActivity, mockAny, mockAny).Return(
		campaign.HostLease{LeaseID: 1, Pending: 3, BudgetExhausted: true}, nil)
	spec := testSpec()
	spec.Limits.MaxPages = 10
	run(t, env, spec)
	if f.finished == nil || f.finished.ExcludeRest != ExcludedAtLimit {
		t.Fatalf("finish %+v, want the rest excluded at the page limit", f.finished)
	}
}

// TestAdaptiveWeightsFavourFastNodes: with adaptive weights on, a node
// whose requests take ten times longer loses weight at the next membership
// refresh, and the change is recorded; off, nothing changes.
func TestAdaptiveWeightsFavourFastNodes(t *testing.T) {
	for _, on := range []bool{true, false} {
		f := newFakeCluster(40, 6, alive("fast", 1), alive("slow", 1))
		f.latency = map[string]int64{"slow": 100}
		f.holdAfter = 200
		env := newEnv(t, f)
		midCampaignFor(env, f, 11*time.Second, func() {})
		spec := testSpec()
		spec.Dispatch.AdaptiveWeights = on
		run(t, env, spec)
		var changes []campaign.RingChange
		for _, ch := range f.changes {
			if ch.Reason == reasonAdaptive {
				changes = append(changes, ch)
			}
		}
		if !on {
			if len(changes) != 0 {
				t.Fatalf("adaptive weights off, yet changes %+v", changes)
			}
			continue
		}
		var slowDown, fastUp bool
		for _, ch := range changes {
			slowDown = slowDown || (ch.Node == "slow" && ch.NewWeight < ch.OldWeight)
			fastUp = fastUp || (ch.Node == "fast" && ch.NewWeight > ch.OldWeight)
		}
		if !slowDown || !fastUp {
			t.Fatalf("adaptive changes %+v: want slow down and fast up", changes)
		}
	}
}

var mockAny = mock.Anything

// wantDiedAndJoined fails the test unless the ring changes recorded say
// node b died and node d joined with weight 3.
func wantDiedAndJoined(t *testing.T, changes []campaign.RingChange) {
	t.Helper()
	var died, joined bool
	for _, ch := range changes {
		died = died || (ch.Node == "b" && ch.NewState == campaign.NodeDead && ch.Reason == reasonDied)
		joined = joined || (ch.Node == "d" && ch.NewWeight == 3 && ch.Reason == reasonJoined)
	}
	if !died || !joined {
		t.Errorf("ring changes %+v: want b died and d joined", changes)
	}
}

// TestLeaseAnsweredAfterItsNodeDiedSendsItNothing: a lease that offered
// room to a node which the registry then showed dead, answered only after
// the workflow saw the death, hands that node's URLs back rather than
// scheduling a batch on its queue. No node polls that queue, and with no
// ScheduleToStart the batch would wait there, uncancelled, for ever.
func TestLeaseAnsweredAfterItsNodeDiedSendsItNothing(t *testing.T) {
	f := newFakeCluster(30, 4, alive("a", 1), alive("b", 1))
	f.holdAfter = 40
	seen := make(chan struct{}) // the workflow recorded b's death
	var seenOnce, gateOnce sync.Once
	f.onChanges = func(changes []campaign.RingChange) {
		for _, ch := range changes {
			if ch.Node == "b" && ch.NewState == campaign.NodeDead {
				seenOnce.Do(func() { close(seen) })
			}
		}
	}
	var gated bool
	f.leaseGate = func(req campaign.LeaseHostsRequest) {
		f.mu.Lock()
		bGone := !f.nodes[1].Alive
		f.mu.Unlock()
		if !bGone || !offeredTo([]campaign.LeaseHostsRequest{req}, "b") {
			return
		}
		gateOnce.Do(func() {
			gated = true
			select { // answered once the workflow has seen b die
			case <-seen:
			case <-time.After(time.Minute):
				t.Error("the workflow never recorded b's death")
			}
		})
	}
	env := newEnv(t, f)
	var sentBefore int
	midCampaignFor(env, f, 3*time.Second, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.nodes = []campaign.NodeInfo{alive("a", 1), {ID: "b", Weight: 1, Incarnation: "b-1"}}
		sentBefore = len(f.fetches)
	})
	spec := testSpec()
	spec.Dispatch.MembershipRefresh = campaign.Duration(time.Second)
	run(t, env, spec)
	if !gated {
		t.Fatal("no lease offered room to b after it died: the test did not set up the race")
	}
	if n := countFor(f.fetches[sentBefore:], "b"); n != 0 {
		t.Fatalf("%d batches were sent to b after it died", n)
	}
	if f.fetched != 120 {
		t.Fatalf("fetched %d of 120", f.fetched)
	}
}

// TestNewRunsRecordTheMarkersV011Reads: a new run records every version
// marker a v0.11.0 node reads, so that such a node, beside this release's
// in a rolling upgrade, replays the run as this release runs it.
func TestNewRunsRecordTheMarkersV011Reads(t *testing.T) {
	f := newFakeCluster(2, 2, alive("a", 1))
	env := newEnv(t, f)
	meter := newHistoryMeter(env, false)
	run(t, env, testSpec())
	meter.mu.Lock()
	defer meter.mu.Unlock()
	for _, change := range []string{hostFlowChange, controlRetryChange, boundedRunChange, staleRouteChange} {
		if !meter.versions[change] {
			t.Errorf("the run recorded no %q marker; recorded %v", change, meter.versions)
		}
	}
}
