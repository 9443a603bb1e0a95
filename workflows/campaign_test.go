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
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
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
	releases []campaign.ReleaseRequest
	leases   []campaign.LeaseHostsRequest
	// leasedAfter are the lease requests made once release was called.
	leasedAfter []campaign.LeaseHostsRequest
	changes     []campaign.RingChange
	finished    *campaign.FinishRequest
	// window is the spec's window_per_node, to check against.
	window     int
	overWindow []string
	// failFetch, if set, answers a fetch instead of doing it.
	failFetch func(ctx context.Context, req campaign.FetchBatchRequest) error
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
	seq  int64
	ok   bool
	// route is what a v0.1.0 node names the batch's holder by.
	route int
	// chunks: the batch's pages are kept for processors in chunks.
	chunks bool
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
	reg(func(ctx context.Context, req campaign.FetchBatchRequest) (campaign.BatchResult, error) {
		f.mu.Lock()
		f.fetches = append(f.fetches, fetchCall{node: req.Node, ids: slices.Clone(req.IDs), seq: req.Seq, route: req.Route, chunks: req.BodyChunks})
		call := len(f.fetches) - 1
		fail := f.failFetch
		if f.outageAt > 0 && len(f.fetches) == f.outageAt {
			f.outageFrom = f.now()
			f.outageTo = f.outageFrom.Add(f.outageFor)
		}
		if err := f.unreachable(); err != nil {
			f.batches[req.Node]-- // the node cannot claim it: the workflow releases it
			f.mu.Unlock()
			return campaign.BatchResult{}, temporal.NewApplicationError("claim batch: "+err.Error(), "ClaimFailed")
		}
		f.mu.Unlock()
		if fail != nil {
			if err := fail(ctx, req); err != nil {
				f.mu.Lock()
				f.batches[req.Node]-- // the workflow gives it up and releases its URLs
				f.mu.Unlock()
				return campaign.BatchResult{}, err
			}
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		f.fetches[call].ok = true
		f.settle(req.Node, req.IDs, false)
		perRequest := f.latency[req.Node]
		if perRequest == 0 {
			perRequest = 10
		}
		return campaign.BatchResult{Fetched: len(req.IDs), Requests: len(req.IDs), RequestMillis: perRequest * int64(len(req.IDs))}, nil
	}, campaign.FetchBatchActivity)
	reg(func(_ context.Context, req campaign.ReleaseRequest) (int, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if err := f.unreachable(); err != nil {
			return 0, err
		}
		f.releases = append(f.releases, req)
		n := 0
		for _, id := range req.IDs {
			if _, ok := f.expires[id]; f.done[id] || (!ok && f.now != nil) {
				continue // committed before its node died, or its lease expired: not leased any more
			}
			delete(f.expires, id)
			key := f.keyOf[id]
			f.inflight[key]--
			f.pending[key] = append(f.pending[key], id)
			n++
		}
		return n, nil
	}, campaign.ReleaseBatchActivity)
	reg(func(_ context.Context, req campaign.MembershipRequest) ([]campaign.NodeInfo, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if err := f.unreachable(); err != nil {
			return nil, err
		}
		if req.Pull {
			var registry []campaign.NodeInfo
			for _, n := range f.nodes {
				n.Capabilities = []string{campaign.CapPull}
				registry = append(registry, n)
			}
			answer := campaign.MembershipChanges(registry, req.Known)
			f.memberships = append(f.memberships, answer)
			return answer, nil
		}
		return slices.Clone(f.nodes), nil
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

// newEnv runs the campaign as runs that schedule a FetchBatch activity per
// batch (hostFlowChange version 1): the releases that made them are still
// supported. Pool runs are tested in pool_test.go.
func newEnv(t *testing.T, f *fakeCluster) *testsuite.TestWorkflowEnvironment {
	return newEnvAt(t, f, batchRuns)
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

func TestRoutesEveryHostToItsRingOwnerWithinTheWindow(t *testing.T) {
	f := newFakeCluster(12, 5, alive("a", 1), alive("b", 1), alive("c", 2))
	env := newEnv(t, f)
	sum := run(t, env, testSpec())
	if sum.Fetched != 60 || f.finished == nil || f.finished.Outcome != campaign.OutcomeCompleted {
		t.Fatalf("summary %+v finish %+v; want all 60 fetched and completed", sum, f.finished)
	}
	r := ring.New(ring.Node{ID: "a", Weight: 1}, ring.Node{ID: "b", Weight: 1}, ring.Node{ID: "c", Weight: 2})
	for _, c := range f.fetches {
		for _, id := range c.ids {
			if owner, _ := r.Lookup(f.keyOf[id]); owner != c.node {
				t.Errorf("URL %d of %s went to %s, ring owner %s", id, f.keyOf[id], c.node, owner)
			}
		}
	}
	if len(f.overWindow) > 0 {
		t.Errorf("leases asked past the window of 2 batches per node: %v", f.overWindow)
	}
	for _, l := range f.leases {
		if time.Duration(l.Horizon) != Horizon || l.BatchSize != 10 {
			t.Fatalf("lease request %+v, want the horizon and batch size", l)
		}
	}
	if len(f.changes) != 3 || f.changes[0].Reason != reasonJoined {
		t.Errorf("ring changes %+v, want three joins", f.changes)
	}
	// Each batch has a route of its own: v0.1.0 nodes name holders by it.
	routes := map[int]bool{}
	for _, c := range f.fetches {
		if c.route == 0 || routes[c.route] {
			t.Fatalf("batch %d has route %d, not its own", c.seq, c.route)
		}
		routes[c.route] = true
	}
}

// TestBusyIsNotDead: a batch that times out (its heartbeats stopped) goes
// back to the frontier, but its node is not marked suspect and keeps its
// hosts: only the registry says a node is dead. The SDK test environment
// never fires timeouts itself, so the activity returns one.
func TestBusyIsNotDead(t *testing.T) {
	f := newFakeCluster(6, 3, alive("a", 1), alive("b", 1))
	var once sync.Once
	f.failFetch = func(ctx context.Context, req campaign.FetchBatchRequest) error {
		var err error
		once.Do(func() {
			err = temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_HEARTBEAT, nil, campaign.BatchResult{Fetched: 0})
		})
		return err
	}
	env := newEnv(t, f)
	sum := run(t, env, testSpec())
	if sum.Fetched != 18 {
		t.Fatalf("fetched %d of 18", sum.Fetched)
	}
	if len(f.releases) != 1 || len(f.releases[0].IDs) == 0 {
		t.Fatalf("releases %+v, want the timed-out batch's URLs released once", f.releases)
	}
	for _, ch := range f.changes {
		if ch.NewState != campaign.NodeActive {
			t.Errorf("ring change %+v: a timeout must not take a node out of the ring", ch)
		}
	}
	timedOut := f.fetches[slices.IndexFunc(f.fetches, func(c fetchCall) bool { return !c.ok })]
	for _, c := range f.fetches {
		if c.ok && c.node != timedOut.node && slices.ContainsFunc(c.ids, func(id int64) bool { return slices.Contains(timedOut.ids, id) }) {
			t.Fatalf("URLs of the timed-out batch on %s were moved to %s: its hosts must stay", timedOut.node, c.node)
		}
	}
}

// TestDeadNodesBatchesMove: a node whose registry heartbeat expires loses
// its batches (cancelled; their URLs released) and its hosts, and a new
// node joins; both recorded.
func TestDeadNodesBatchesMove(t *testing.T) {
	f := newFakeCluster(30, 4, alive("a", 1), alive("b", 1))
	f.holdAfter = 40
	var hung sync.Once
	var hungIDs []int64
	f.failFetch = func(ctx context.Context, req campaign.FetchBatchRequest) error {
		wait := false
		if req.Node == "b" {
			hung.Do(func() { wait, hungIDs = true, req.IDs })
		}
		if wait { // b dies with this batch: it answers only the cancellation
			<-ctx.Done()
			return temporal.NewCanceledError()
		}
		return nil
	}
	env := newEnv(t, f)
	var sentBefore int
	midCampaignFor(env, f, 3*time.Second, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.nodes = []campaign.NodeInfo{alive("a", 1), {ID: "b", Weight: 1, Incarnation: "b-1"}, alive("d", 3)}
		sentBefore = len(f.fetches)
	})
	spec := testSpec()
	spec.Dispatch.MembershipRefresh = campaign.Duration(time.Second)
	run(t, env, spec)
	if offeredTo(f.leasedAfter, "b") || !offeredTo(f.leasedAfter, "d") || countFor(f.fetches[sentBefore:], "d") == 0 {
		t.Fatalf("after the refresh the leases offered room to b %v and d %v; want only d", offeredTo(f.leasedAfter, "b"), offeredTo(f.leasedAfter, "d"))
	}
	if f.fetched != 120 {
		t.Fatalf("fetched %d of 120", f.fetched)
	}
	released := false
	for _, r := range f.releases {
		released = released || slices.Equal(r.IDs, hungIDs)
	}
	if !released {
		t.Fatalf("releases %+v: the dead node's batch %v was not released", f.releases, hungIDs)
	}
	wantDiedAndJoined(t, f.changes)
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

// TestContinueAsNewDoesNotWaitForBatches: batches in flight at
// continue-as-new are handed on as orphans, not awaited; the next run
// releases what no node picked up and counts their late reports.
func TestContinueAsNewDoesNotWaitForBatches(t *testing.T) {
	f := newFakeCluster(4, 6, alive("a", 1), alive("b", 2))
	block := make(chan struct{})
	t.Cleanup(func() { close(block) })
	var blocked sync.Once
	f.failFetch = func(ctx context.Context, req campaign.FetchBatchRequest) error {
		wait := false
		blocked.Do(func() { wait = true })
		if wait {
			select { // still running when the run continues as new
			case <-block:
			case <-ctx.Done():
			}
		}
		return nil
	}
	env := newEnv(t, f)
	env.RegisterDelayedCallback(func() { env.SetContinueAsNewSuggested(true) }, time.Second)
	env.ExecuteWorkflow(campaign.WorkflowType, testSpec())
	var can *workflow.ContinueAsNewError
	if err := env.GetWorkflowError(); !errors.As(err, &can) {
		t.Fatalf("error %v, want continue-as-new", err)
	}
	var spec campaign.Spec
	var carry *campaign.Carry
	if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &spec, &carry); err != nil {
		t.Fatal(err)
	}
	if carry.CampaignKey != 42 || carry.Run != 1 || len(carry.Nodes) != 2 || len(carry.Orphans) == 0 || carry.BatchSeq == 0 {
		t.Fatalf("carry %+v, want key 42, run 1, both nodes and the batch in flight as an orphan", carry)
	}

	// The next run releases the orphans' unclaimed URLs and takes their
	// late reports, each once.
	f2 := newFakeCluster(1, 4, alive("a", 1), alive("b", 2))
	f2.holdAfter = 1
	env2 := newEnv(t, f2)
	orphan := carry.Orphans[0]
	late := campaign.BatchReport{Seq: orphan.Seq, Node: orphan.Node, Result: campaign.BatchResult{Fetched: 5}}
	var status campaign.Status
	midCampaignFor(env2, f2, time.Second, func() {
		env2.SignalWorkflow(campaign.BatchReportSignal, late)
		env2.SignalWorkflow(campaign.BatchReportSignal, late)
		env2.SignalWorkflow(campaign.BatchReportSignal, campaign.BatchReport{Seq: 9999, Node: "a", Result: campaign.BatchResult{Fetched: 7}})
		env2.RegisterDelayedCallback(func() {
			v, err := env2.QueryWorkflow(campaign.StatusQuery)
			if err == nil {
				err = v.Get(&status)
			}
			if err != nil {
				t.Error(err)
			}
		}, 100*time.Millisecond)
	})
	env2.ExecuteWorkflow(campaign.WorkflowType, spec, carry)
	if err := env2.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if len(f2.releases) == 0 || !slices.Contains(f2.releases[0].Leases, orphan.LeaseID) {
		t.Fatalf("releases %+v, want the orphans' leases released first", f2.releases)
	}
	if want := carry.Counters.Fetched + 1 + 5; status.Counters.Fetched != want {
		t.Fatalf("fetched %d after the late report, want %d (the report counted once, an unknown one not at all)", status.Counters.Fetched, want)
	}
}

// TestRunsStartedBeforeHostFlowStayLegacy: a run whose history predates
// the host-aware dispatcher replays under the v0.1.0 code (it leases with
// LeaseBatch).
func TestRunsStartedBeforeHostFlowStayLegacy(t *testing.T) {
	f := newFakeCluster(1, 1, alive("a", 1))
	env := newEnvAt(t, f, workflow.DefaultVersion)
	legacyLeases := 0
	env.RegisterActivityWithOptions(func(_ context.Context, req campaign.LeaseRequest) (campaign.Lease, error) {
		legacyLeases++
		return campaign.Lease{LeaseID: 1}, nil
	}, activity.RegisterOptions{Name: campaign.LeaseBatchActivity})
	env.ExecuteWorkflow(campaign.WorkflowType, testSpec())
	var can *workflow.ContinueAsNewError
	if err := env.GetWorkflowError(); !errors.As(err, &can) {
		t.Fatalf("error %v: a v0.1.0 run on a newer worker must continue as new into the current dispatcher", err)
	}
	if len(f.leases) != 0 {
		t.Fatal("a legacy run leased with LeaseHosts")
	}
}

func TestReweightAndDrainMoveHosts(t *testing.T) {
	f := newFakeCluster(30, 4, alive("a", 1), alive("b", 1), alive("c", 1))
	f.holdAfter = 40
	env := newEnv(t, f)
	var sentBefore int
	rw, drain := &updateCallbacks{}, &updateCallbacks{}
	midCampaignFor(env, f, 100*time.Millisecond, func() {
		env.UpdateWorkflow(campaign.Reweight, "rw-1", rw, campaign.ReweightRequest{Node: "a", Weight: new(0.0)})
		env.UpdateWorkflow(campaign.Drain, "drain-1", drain, campaign.NodeRequest{Node: "c"})
		sentBefore = len(f.fetches)
	})
	run(t, env, testSpec())
	if rw.rejected != nil || drain.rejected != nil || len(f.fetches) == sentBefore {
		t.Fatalf("reweight %v drain %v; %d batches after", rw.rejected, drain.rejected, len(f.fetches)-sentBefore)
	}
	if countFor(f.fetches[:sentBefore], "a") == 0 || countFor(f.fetches[:sentBefore], "c") == 0 {
		t.Fatal("a or c had no batches before; the test proves nothing")
	}
	if offeredTo(f.leasedAfter, "a") || offeredTo(f.leasedAfter, "c") || len(f.leasedAfter) == 0 {
		t.Fatal("a at weight 0 or drained c was offered batches after the change")
	}
	var reweighted, drained bool
	for _, ch := range f.changes {
		reweighted = reweighted || (ch.Node == "a" && ch.OldWeight == 1 && ch.NewWeight == 0 && ch.Reason == "signal reweight")
		drained = drained || (ch.Node == "c" && ch.NewState == campaign.NodeDrained)
	}
	if !reweighted || !drained {
		t.Errorf("history rows %+v, want the reweight and the drain", f.changes)
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

// TestContinueAsNewLeasesWithManyDeadNodes is issue 11's continue-as-new
// loop: nodes join and die across runs with max_history_events at its
// minimum (500). Each run must lease and fetch before it continues as new,
// and the carry must not grow with nodes long dead: a node is carried at
// most into the run after the one it died in, even one that died with a
// batch it never answered for; and a run's history must stay within
// max_history_events. v0.1.0 kept every node ever seen and set the
// margin to 8 × window × nodes: with 16 nodes and the default window of 4
// the margin passed 500 and every run continued as new at its first task,
// leasing nothing.
func TestContinueAsNewLeasesWithManyDeadNodes(t *testing.T) {
	const (
		runs    = 5
		perRun  = 16 // nodes alive in a run; those of earlier runs are dead
		maxHist = 500
	)
	f := newFakeCluster(400, 10)
	f.window = campaign.DefaultWindowPerNode
	// Each run, one node hangs on its batches, not even answering their
	// cancellation, and the registry calls it dead: its batches are still
	// open when the run continues as new.
	hung := make(chan struct{})
	t.Cleanup(func() { close(hung) })
	f.failFetch = func(ctx context.Context, req campaign.FetchBatchRequest) error {
		if strings.HasSuffix(req.Node, "-doomed") {
			<-hung
			return temporal.NewCanceledError()
		}
		return nil
	}
	spec := testSpec()
	spec.Dispatch.WindowPerNode = campaign.DefaultWindowPerNode
	spec.Dispatch.MaxHistoryEvents = maxHist
	spec.Dispatch.MembershipRefresh = campaign.Duration(time.Second)

	var carry *campaign.Carry
	var dead []campaign.NodeInfo
	for r := 1; r <= runs; r++ {
		var nodes []campaign.NodeInfo
		for i := range perRun {
			nodes = append(nodes, alive(fmt.Sprintf("r%d-n%02d", r, i), 1))
		}
		doomed := alive(fmt.Sprintf("r%d-doomed", r), 1)
		f.mu.Lock()
		f.nodes = append(append(slices.Clone(dead), nodes...), doomed)
		before := len(f.fetches)
		f.mu.Unlock()

		env := newEnv(t, f)
		meter := newHistoryMeter(env, true)
		env.RegisterDelayedCallback(func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.nodes[len(f.nodes)-1].Alive = false
		}, 1500*time.Millisecond)
		if carry == nil {
			env.ExecuteWorkflow(campaign.WorkflowType, spec)
		} else {
			env.ExecuteWorkflow(campaign.WorkflowType, spec, carry)
		}
		var can *workflow.ContinueAsNewError
		if err := env.GetWorkflowError(); !errors.As(err, &can) {
			t.Fatalf("run %d ended with %v, want continue-as-new (the frontier is far from done)", r, err)
		}
		carry = nil
		if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &spec, &carry); err != nil {
			t.Fatal(err)
		}
		f.mu.Lock()
		fetched, doomedBatches := 0, 0
		for _, c := range f.fetches[before:] {
			if c.ok {
				fetched += len(c.ids)
			}
			if c.node == doomed.ID {
				doomedBatches++
			}
		}
		f.mu.Unlock()
		t.Logf("run %d: %d estimated events, %d URLs fetched, carry of %d nodes and %d orphans",
			r, meter.total(), fetched, len(carry.Nodes), len(carry.Orphans))
		if fetched == 0 {
			t.Fatalf("run %d continued as new without fetching anything", r)
		}
		if meter.total() > maxHist {
			t.Fatalf("run %d wrote some %d events, past max_history_events %d", r, meter.total(), maxHist)
		}
		if doomedBatches == 0 {
			t.Fatalf("run %d: %s got no batch before it died; the test proves less than it says", r, doomed.ID)
		}
		// A node that died in this run may still be carried, with the
		// batches it had open; one dead in an earlier run may not.
		for _, n := range carry.Nodes {
			if !strings.HasPrefix(n.ID, fmt.Sprintf("r%d-", r)) && !strings.HasPrefix(n.ID, fmt.Sprintf("r%d-", r-1)) {
				t.Fatalf("run %d carried node %s, dead since an earlier run (%d nodes carried): dead nodes pile up", r, n.ID, len(carry.Nodes))
			}
		}
		for _, n := range append(nodes, doomed) {
			n.Alive = false
			dead = append(dead, n)
		}
	}
}

// TestStatusAgreesWithPostgresAfterNodeDies is issue 11 defect 9: a node
// commits part of a batch and dies before it reports it (its last
// heartbeat predates the commit). When the campaign ends, status must give
// Postgres' figures, overall and for the node, not the sum of reports.
func TestStatusAgreesWithPostgresAfterNodeDies(t *testing.T) {
	f := newFakeCluster(30, 4, alive("a", 1), alive("b", 1))
	f.holdAfter = 40
	var dies sync.Once
	committed := 0
	f.failFetch = func(ctx context.Context, req campaign.FetchBatchRequest) error {
		victim := false
		if req.Node == "b" && len(req.IDs) >= 2 {
			dies.Do(func() { victim = true })
		}
		if !victim {
			return nil
		}
		f.mu.Lock()
		half := req.IDs[:len(req.IDs)/2]
		committed = len(half)
		for _, id := range half {
			key := f.keyOf[id]
			f.inflight[key]--
			f.fetched++
			f.done[id] = true
			f.perNode["b"]++
		}
		f.mu.Unlock()
		<-ctx.Done() // b is gone: it answers only the cancellation, with nothing reported
		return temporal.NewCanceledError()
	}
	env := newEnv(t, f)
	midCampaignFor(env, f, 3*time.Second, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.nodes = []campaign.NodeInfo{alive("a", 1), {ID: "b", Weight: 1, Incarnation: "b-1"}}
	})
	spec := testSpec()
	spec.Dispatch.MembershipRefresh = campaign.Duration(time.Second)
	sum := run(t, env, spec)
	if committed == 0 {
		t.Fatal("b never committed part of a batch; the test proves nothing")
	}
	if sum.Fetched != 120 {
		t.Fatalf("summary says %d fetched, want 120", sum.Fetched)
	}
	v, err := env.QueryWorkflow(campaign.StatusQuery)
	if err != nil {
		t.Fatal(err)
	}
	var st campaign.Status
	if err := v.Get(&st); err != nil {
		t.Fatal(err)
	}
	if st.Counters.Fetched != sum.Fetched {
		t.Errorf("status says %d fetched, Postgres %d: the %d pages b committed before dying are missing",
			st.Counters.Fetched, sum.Fetched, committed)
	}
	for _, n := range st.Nodes {
		if want := sum.PerNode[n.ID]; n.Fetched != want {
			t.Errorf("status says node %s fetched %d, Postgres %d", n.ID, n.Fetched, want)
		}
	}
}

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
