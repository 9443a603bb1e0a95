package legacy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
// shard-keyed URLs and a registry of nodes. It records what the workflow
// asked for, so tests check routing, not implementation details.
type fakeCluster struct {
	mu       sync.Mutex
	nodes    []campaign.NodeInfo
	pending  []campaign.LeaseGroup // one ID per group keeps routing visible
	leaseID  int64
	done     map[int64]bool
	fetches  []fetchCall
	changes  []campaign.RingChange
	finished *campaign.FinishRequest
	// failFetch, if set, answers a fetch instead of doing it.
	failFetch func(req campaign.FetchBatchRequest) error
	// onFetch runs before each fetch is answered.
	onFetch func(req campaign.FetchBatchRequest)
	// holdAfter, when > 0, stops leasing after that many URLs (answering
	// "pending, due in a second") until release is called: a point in the
	// middle of a campaign where a test acts, in workflow time.
	holdAfter int
	leased    int
	released  bool
	// latency is each node's ms per request (default 10).
	latency map[string]int64
	// attrs are the search attributes StartCampaign says are registered.
	attrs []string
}

func (f *fakeCluster) release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = true
}

// midCampaign runs act at a point where the campaign has leased holdAfter
// URLs and waits for more, then lets it go on.
func midCampaign(env *testsuite.TestWorkflowEnvironment, f *fakeCluster, act func()) {
	midCampaignFor(env, f, 100*time.Millisecond, act)
}

// midCampaignFor holds the campaign for hold after act.
func midCampaignFor(env *testsuite.TestWorkflowEnvironment, f *fakeCluster, hold time.Duration, act func()) {
	env.RegisterDelayedCallback(func() {
		act()
		env.RegisterDelayedCallback(f.release, hold)
	}, 500*time.Millisecond)
}

type fetchCall struct {
	node  string
	ids   []int64
	route int
	ok    bool
}

func newFakeCluster(hosts, perHost int, nodes ...campaign.NodeInfo) *fakeCluster {
	f := &fakeCluster{nodes: nodes, done: map[int64]bool{}}
	id := int64(0)
	for h := range hosts {
		for range perHost {
			id++
			f.pending = append(f.pending, campaign.LeaseGroup{ShardKey: fmt.Sprintf("host-%d.test", h), IDs: []int64{id}})
		}
	}
	return f
}

func (f *fakeCluster) keyOf(id int64) string {
	for _, g := range f.all() {
		if g.IDs[0] == id {
			return g.ShardKey
		}
	}
	return ""
}

func (f *fakeCluster) all() []campaign.LeaseGroup { return f.pending }

func (f *fakeCluster) register(env *testsuite.TestWorkflowEnvironment) {
	reg := func(fn any, name string) { env.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name}) }
	reg(func(_ context.Context, req campaign.StartRequest) (campaign.StartResult, error) {
		return campaign.StartResult{CampaignKey: 42, SeedsInserted: len(req.Spec.Seeds), SearchAttributes: f.attrs}, nil
	}, campaign.StartCampaignActivity)
	reg(func(_ context.Context, req campaign.LeaseRequest) (campaign.Lease, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.leaseID++
		lease := campaign.Lease{LeaseID: f.leaseID}
		if f.holdAfter > 0 && f.leased >= f.holdAfter && !f.released {
			lease.Pending, lease.NextDue = 1, campaign.Duration(time.Second)
			return lease, nil
		}
		byKey := map[string]int{}
		for _, g := range f.pending {
			id := g.IDs[0]
			if f.done[id] || lease.Size() >= req.Limit || (f.holdAfter > 0 && !f.released && f.leased >= f.holdAfter) {
				continue
			}
			f.leased++
			f.done[id] = true // leased: a fake lease never expires
			i, ok := byKey[g.ShardKey]
			if !ok {
				i = len(lease.Groups)
				byKey[g.ShardKey] = i
				lease.Groups = append(lease.Groups, campaign.LeaseGroup{ShardKey: g.ShardKey})
			}
			lease.Groups[i].IDs = append(lease.Groups[i].IDs, id)
		}
		return lease, nil
	}, campaign.LeaseBatchActivity)
	reg(func(_ context.Context, req campaign.FetchBatchRequest) (campaign.BatchResult, error) {
		f.mu.Lock()
		f.fetches = append(f.fetches, fetchCall{node: req.Node, ids: slices.Clone(req.IDs), route: req.Route})
		call := len(f.fetches) - 1
		fail, hook := f.failFetch, f.onFetch
		f.mu.Unlock()
		if hook != nil {
			hook(req)
		}
		if fail != nil {
			if err := fail(req); err != nil {
				return campaign.BatchResult{}, err
			}
		}
		f.mu.Lock()
		f.fetches[call].ok = true
		perRequest := f.latency[req.Node]
		f.mu.Unlock()
		if perRequest == 0 {
			perRequest = 10
		}
		return campaign.BatchResult{Fetched: len(req.IDs), Requests: len(req.IDs), RequestMillis: perRequest * int64(len(req.IDs))}, nil
	}, campaign.FetchBatchActivity)
	reg(func(_ context.Context, req campaign.ReleaseRequest) (int, error) { return len(req.IDs), nil }, campaign.ReleaseBatchActivity)
	reg(func(_ context.Context, req campaign.MembershipRequest) ([]campaign.NodeInfo, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		return slices.Clone(f.nodes), nil
	}, campaign.RefreshMembershipActivity)
	reg(func(_ context.Context, req campaign.RecordRingChangesRequest) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.changes = append(f.changes, req.Changes...)
		return nil
	}, campaign.RecordRingChangesActivity)
	reg(func(_ context.Context, req campaign.FinishRequest) (campaign.Summary, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.finished = &req
		n := int64(0)
		for _, c := range f.fetches {
			if c.ok {
				n += int64(len(c.ids))
			}
		}
		return campaign.Summary{Outcome: req.Outcome, Fetched: n}, nil
	}, campaign.FinishCampaignActivity)
}

func alive(id string, w float64) campaign.NodeInfo {
	return campaign.NodeInfo{ID: id, Weight: w, Alive: true, Incarnation: id + "-1"}
}

func newEnv(t *testing.T, f *fakeCluster) *testsuite.TestWorkflowEnvironment {
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(tlog.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	env := suite.NewTestWorkflowEnvironment()
	env.SetTestTimeout(30 * time.Second)
	env.RegisterWorkflowWithOptions(CrawlCampaign, workflow.RegisterOptions{Name: campaign.WorkflowType})
	// As run by v0.1.0 itself: a newer worker would retire the run at once.
	env.OnGetVersion(retireChange, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	f.register(env)
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

func TestRoutesEveryHostToItsRingOwner(t *testing.T) {
	f := newFakeCluster(12, 5, alive("a", 1), alive("b", 1), alive("c", 2))
	env := newEnv(t, f)
	sum := run(t, env, testSpec())
	if sum.Fetched != 60 || f.finished == nil || f.finished.Outcome != campaign.OutcomeCompleted {
		t.Fatalf("summary %+v finish %+v; want all 60 fetched and completed", sum, f.finished)
	}
	r := ring.New(ring.Node{ID: "a", Weight: 1}, ring.Node{ID: "b", Weight: 1}, ring.Node{ID: "c", Weight: 2})
	for _, c := range f.fetches {
		if len(c.ids) > 10 {
			t.Errorf("batch of %d URLs, batch_size is 10", len(c.ids))
		}
		for _, id := range c.ids {
			if owner, _ := r.Lookup(f.keyOf(id)); owner != c.node {
				t.Errorf("URL %d of %s went to %s, ring owner %s", id, f.keyOf(id), c.node, owner)
			}
		}
	}
	// The first membership refresh records the campaign's ring.
	if len(f.changes) != 3 || f.changes[0].Reason != reasonJoined {
		t.Errorf("ring changes %+v, want three joins", f.changes)
	}
}

// TestReroutesBatchOfTimedOutNode mocks the ScheduleToStart timeout the SDK
// test environment never fires: the batch must move to the next node on the
// ring for each of its hosts, and the node must leave the ring.
func TestReroutesBatchOfTimedOutNode(t *testing.T) {
	f := newFakeCluster(12, 3, alive("a", 1), alive("b", 1), alive("c", 1))
	var deadBatches [][]int64
	f.failFetch = func(req campaign.FetchBatchRequest) error {
		if req.Node == "b" {
			f.mu.Lock()
			deadBatches = append(deadBatches, req.IDs)
			f.mu.Unlock()
			return temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START, nil)
		}
		return nil
	}
	env := newEnv(t, f)
	sum := run(t, env, testSpec())
	if sum.Fetched != 36 {
		t.Fatalf("fetched %d of 36", sum.Fetched)
	}
	if len(deadBatches) == 0 {
		t.Fatal("no batch went to b; pick a layout where b owns hosts")
	}
	full := ring.New(ring.Node{ID: "a", Weight: 1}, ring.Node{ID: "b", Weight: 1}, ring.Node{ID: "c", Weight: 1})
	rerouted := 0
	for _, c := range f.fetches {
		if c.node == "b" {
			continue
		}
		for _, id := range c.ids {
			key := f.keyOf(id)
			if owner, _ := full.Lookup(key); owner == "b" {
				if next, _ := full.Next(key, "b"); next != c.node {
					t.Errorf("%s (owner b) went to %s, want b's successor %s", key, c.node, next)
				}
				rerouted++
			}
		}
	}
	if rerouted == 0 {
		t.Fatal("none of b's URLs were fetched elsewhere")
	}
	var suspected bool
	for _, ch := range f.changes {
		suspected = suspected || (ch.Node == "b" && ch.NewState == campaign.NodeSuspect && ch.NewWeight == 0)
	}
	if !suspected {
		t.Errorf("no ring change took b out: %+v", f.changes)
	}
	// Only the first batch ever sent to b timed out; later ones avoided it.
	if len(deadBatches) > 2 {
		t.Errorf("%d batches sent to b after it timed out", len(deadBatches)-1)
	}
}

// TestHeartbeatTimeoutReroutesWholeBatch: a batch whose node stops
// heartbeating moves on whole; claiming in the store skips what the first
// holder settled.
func TestHeartbeatTimeoutReroutesWholeBatch(t *testing.T) {
	f := newFakeCluster(1, 4, alive("a", 1), alive("b", 1))
	var once sync.Once
	f.failFetch = func(req campaign.FetchBatchRequest) error {
		var err error
		once.Do(func() {
			err = temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_HEARTBEAT, nil, campaign.BatchResult{Fetched: 1})
		})
		return err
	}
	env := newEnv(t, f)
	run(t, env, testSpec())
	if len(f.fetches) != 2 || f.fetches[1].route != 1 || len(f.fetches[1].ids) != 4 {
		t.Fatalf("fetches %+v, want the batch rerouted once with all its IDs", f.fetches)
	}
}

func TestDrainedNodeGetsNoNewBatches(t *testing.T) {
	f := newFakeCluster(20, 8, alive("a", 1), alive("b", 1), alive("c", 1))
	f.holdAfter = 40
	env := newEnv(t, f)
	var sentBefore int
	drain := &updateCallbacks{}
	midCampaign(env, f, func() {
		env.UpdateWorkflow(campaign.Drain, "drain-1", drain, campaign.NodeRequest{Node: "c"})
		f.mu.Lock()
		sentBefore = len(f.fetches)
		f.mu.Unlock()
	})
	run(t, env, testSpec())
	if drain.rejected != nil || drain.result.State != campaign.NodeDrained {
		t.Fatalf("drain answered %+v (%v), want c drained (nothing was in flight)", drain.result, drain.rejected)
	}
	for _, c := range f.fetches[:sentBefore] {
		if c.node == "c" {
			goto cHadWork
		}
	}
	t.Fatal("c got no batch before the drain; the test proves nothing")
cHadWork:
	if len(f.fetches) == sentBefore {
		t.Fatal("no batches after the drain")
	}
	for _, c := range f.fetches[sentBefore:] {
		if c.node == "c" {
			t.Fatalf("drained node c got a batch after the drain")
		}
	}
	if drain.result.BatchesSent != countFor(f.fetches, "c") {
		t.Errorf("c had %d batches at the drain and %d in all", drain.result.BatchesSent, countFor(f.fetches, "c"))
	}
	found := false
	for _, ch := range f.changes {
		found = found || (ch.Node == "c" && ch.NewState == campaign.NodeDrained && ch.Reason == "signal drain")
	}
	if !found {
		t.Errorf("no history row for the drain: %+v", f.changes)
	}
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

func TestReweightMovesHosts(t *testing.T) {
	f := newFakeCluster(30, 4, alive("a", 1), alive("b", 1))
	f.holdAfter = 40
	env := newEnv(t, f)
	var sentBefore int
	rw := &updateCallbacks{}
	midCampaign(env, f, func() {
		env.UpdateWorkflow(campaign.Reweight, "rw-1", rw, campaign.ReweightRequest{Node: "a", Weight: new(0.0)})
		sentBefore = len(f.fetches)
	})
	run(t, env, testSpec())
	if rw.rejected != nil || len(f.fetches) == sentBefore {
		t.Fatalf("reweight %v; %d batches after it", rw.rejected, len(f.fetches)-sentBefore)
	}
	if countFor(f.fetches[:sentBefore], "a") == 0 {
		t.Fatal("a had no batches before the reweight; the test proves nothing")
	}
	if countFor(f.fetches[sentBefore:], "a") != 0 {
		t.Fatal("node a at weight 0 got batches after the reweight")
	}
	found := false
	for _, ch := range f.changes {
		found = found || (ch.Node == "a" && ch.OldWeight == 1 && ch.NewWeight == 0 && ch.Reason == "signal reweight")
	}
	if !found {
		t.Errorf("no history row for the reweight: %+v", f.changes)
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
	ghost, noWeight := &updateCallbacks{}, &updateCallbacks{}
	var status campaign.Status
	midCampaign(env, f, func() {
		env.UpdateWorkflow(campaign.Reweight, "rw", ghost, campaign.ReweightRequest{Node: "ghost", Weight: new(2.0)})
		env.UpdateWorkflow(campaign.Reweight, "rw2", noWeight, campaign.ReweightRequest{Node: "a"})
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
	if noWeight.rejected == nil || !strings.Contains(noWeight.rejected.Error(), "weight: is required") {
		t.Errorf("missing weight update: %v", noWeight.rejected)
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
	if !errors.As(err, &appErr) || appErr.Type() != "InvalidSpec" || appErr.NonRetryable() == false {
		t.Fatalf("error %v, want a non-retryable InvalidSpec", err)
	}
	for _, field := range []string{"spec.seeds", "spec.limits.max_pages"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("error %q does not name %s", err, field)
		}
	}
}

func TestContinuesAsNewWhenSuggested(t *testing.T) {
	f := newFakeCluster(4, 4, alive("a", 1), alive("b", 2))
	f.holdAfter = 8
	env := newEnv(t, f)
	midCampaign(env, f, func() { env.SetContinueAsNewSuggested(true) })
	env.ExecuteWorkflow(campaign.WorkflowType, testSpec())
	var can *workflow.ContinueAsNewError
	if err := env.GetWorkflowError(); !errors.As(err, &can) {
		t.Fatalf("error %v, want continue-as-new", err)
	}
	var carry *campaign.Carry
	if err := envDecode(can, &carry); err != nil {
		t.Fatal(err)
	}
	if carry.CampaignKey != 42 || carry.Run != 1 || len(carry.Nodes) != 2 || carry.Nodes[1].Weight != 2 ||
		carry.Counters.Fetched != 8 {
		t.Fatalf("carry %+v, want key 42, run 1, both nodes and the 8 URLs fetched", carry)
	}
}

// envDecode reads the second argument (the carry) of a continue-as-new.
func envDecode(can *workflow.ContinueAsNewError, carry **campaign.Carry) error {
	var spec campaign.Spec
	return converterFor().FromPayloads(can.Input, &spec, carry)
}

func TestMaxPagesEndsWithRestExcluded(t *testing.T) {
	f := newFakeCluster(2, 2, alive("a", 1))
	env := newEnv(t, f)
	env.OnActivity(campaign.LeaseBatchActivity, mockAny, mockAny).Return(campaign.Lease{LeaseID: 1, BudgetExhausted: true}, nil)
	spec := testSpec()
	spec.Limits.MaxPages = 10
	run(t, env, spec)
	if f.finished == nil || f.finished.ExcludeRest != ExcludedAtLimit {
		t.Fatalf("finish %+v, want the rest excluded at the page limit", f.finished)
	}
}

var mockAny = mock.Anything

func converterFor() converter.DataConverter { return converter.GetDefaultDataConverter() }

// TestMembershipMovesHostsOfDeadAndNewNodes: a node whose registry
// heartbeat expires leaves the ring, a new one joins, both recorded.
func TestMembershipMovesHostsOfDeadAndNewNodes(t *testing.T) {
	f := newFakeCluster(30, 4, alive("a", 1), alive("b", 1))
	f.holdAfter = 40
	env := newEnv(t, f)
	var sentBefore int
	// Held past one membership refresh (10s by default).
	midCampaignFor(env, f, 11*time.Second, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.nodes = []campaign.NodeInfo{alive("a", 1), {ID: "b", Weight: 1, Incarnation: "b-1"}, alive("d", 3)}
		sentBefore = len(f.fetches)
	})
	run(t, env, testSpec())
	after := f.fetches[sentBefore:]
	if countFor(after, "b") != 0 || countFor(after, "d") == 0 {
		t.Fatalf("after the refresh b got %d batches and d %d; want none and some", countFor(after, "b"), countFor(after, "d"))
	}
	var died, joined bool
	for _, ch := range f.changes {
		died = died || (ch.Node == "b" && ch.NewState == campaign.NodeDead && ch.Reason == reasonDied)
		joined = joined || (ch.Node == "d" && ch.NewWeight == 3 && ch.Reason == reasonJoined)
	}
	if !died || !joined {
		t.Errorf("ring changes %+v: want b died and d joined", f.changes)
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
