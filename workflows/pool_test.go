package workflows

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/ring"
)

// The fake's side of pool runs: batches routed into "Postgres" are fetched
// by their nodes between the workflow's calls, and the figures are kept
// per node as store.CampaignProgress reads them.

// aliveLocked says whether the registry calls node alive; f.mu is held.
func (f *fakeCluster) aliveLocked(node string) bool {
	return slices.ContainsFunc(f.nodes, func(n campaign.NodeInfo) bool { return n.ID == node && n.Alive })
}

// route queues a pool lease's batches for their nodes; f.mu is held.
func (f *fakeCluster) route(lease *campaign.HostLease) {
	nodes := map[string]bool{}
	for _, b := range lease.Batches {
		ids := b.IDs()
		f.queued = append(f.queued, queuedBatch{lease: lease.LeaseID, node: b.Node, ids: ids})
		f.figure(b.Node).BatchesSent++
		lease.Routed.Batches++
		lease.Routed.URLs += len(ids)
		nodes[b.Node] = true
	}
	lease.Routed.Nodes = len(nodes)
	lease.Batches = nil
}

func (f *fakeCluster) figure(node string) *campaign.NodeFigures {
	if f.figures == nil {
		f.figures = map[string]*campaign.NodeFigures{}
	}
	n := f.figures[node]
	if n == nil {
		n = &campaign.NodeFigures{ID: node}
		f.figures[node] = n
	}
	return n
}

// pull has every live node that is not stalled fetch its queued batches.
func (f *fakeCluster) pull() {
	f.mu.Lock()
	defer f.mu.Unlock()
	kept := f.queued[:0]
	for _, b := range f.queued {
		if !f.aliveLocked(b.node) || f.stalled[b.node] || f.unreachable() != nil {
			kept = append(kept, b) // Postgres away: no node takes a batch
			continue
		}
		f.fetches = append(f.fetches, fetchCall{node: b.node, ids: b.ids, ok: true})
		if f.outageAt > 0 && len(f.fetches) == f.outageAt {
			f.outageFrom = f.now()
			f.outageTo = f.outageFrom.Add(f.outageFor)
		}
		f.settle(b.node, b.ids, false)
		n := f.figure(b.node)
		n.Fetched += int64(len(b.ids))
		n.Requests += int64(len(b.ids))
		perRequest := f.latency[b.node]
		if perRequest == 0 {
			perRequest = 10
		}
		n.RequestMillis += perRequest * int64(len(b.ids))
	}
	f.queued = kept
}

func (f *fakeCluster) registerPool(env *testsuite.TestWorkflowEnvironment) {
	reg := func(fn any, name string) { env.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name}) }
	reg(func(_ context.Context, req campaign.ProgressRequest) (campaign.Progress, error) {
		f.pull()
		f.mu.Lock()
		defer f.mu.Unlock()
		if err := f.unreachable(); err != nil {
			return campaign.Progress{}, err
		}
		f.progress = append(f.progress, req)
		var p campaign.Progress
		var all []campaign.NodeFigures
		for _, id := range slices.Sorted(maps.Keys(f.figures)) {
			n := *f.figures[id]
			n.InflightBatches, n.InflightURLs = 0, 0
			for _, b := range f.queued {
				if b.node == id {
					n.InflightBatches++
					n.InflightURLs += len(b.ids)
				}
			}
			p.Totals.Fetched += int(n.Fetched)
			all = append(all, n)
		}
		p.Nodes, p.After = campaign.ChangedFigures(all, req)
		doc, _ := json.Marshal(p)
		f.progressSize = append(f.progressSize, len(doc))
		return p, nil
	}, campaign.CampaignProgressActivity)
	reg(func(_ context.Context, req campaign.ReleaseNodeBatchesRequest) (int, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.nodeReleases = append(f.nodeReleases, req)
		n := 0
		kept := f.queued[:0]
		for _, b := range f.queued {
			if (req.Nodes == nil || slices.Contains(req.Nodes, b.node)) && (req.Lease == 0 || req.Lease == b.lease) {
				f.settle(b.node, b.ids, true)
				n += len(b.ids)
				continue
			}
			kept = append(kept, b)
		}
		f.queued = kept
		return n, nil
	}, campaign.ReleaseNodeBatchesActivity)
}

func newPoolEnv(t *testing.T, f *fakeCluster) *testsuite.TestWorkflowEnvironment {
	return newEnvAt(t, f, poolRuns)
}

func queryStatus(t *testing.T, env *testsuite.TestWorkflowEnvironment) campaign.Status {
	t.Helper()
	var st campaign.Status
	v, err := env.QueryWorkflow(campaign.StatusQuery)
	if err == nil {
		err = v.Get(&st)
	}
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestPoolRunRoutesEveryHostToItsOwnerWithoutActivities: a pool run's
// leases route each host to its ring owner, no more batches per node than
// its window, into Postgres: no activity is scheduled but the campaign's
// start and finish, and the counters and each node's figures come from
// Postgres.
func TestPoolRunRoutesEveryHostToItsOwnerWithoutActivities(t *testing.T) {
	f := newFakeCluster(12, 5, alive("a", 1), alive("b", 1), alive("c", 2))
	env := newPoolEnv(t, f)
	activities := 0
	env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		if n := info.ActivityType.Name; n != campaign.StartCampaignActivity && n != campaign.FinishCampaignActivity {
			activities++
		}
	})
	sum := run(t, env, testSpec())
	if sum.Fetched != 60 || f.finished == nil || f.finished.Outcome != campaign.OutcomeCompleted {
		t.Fatalf("summary %+v finish %+v; want all 60 fetched and completed", sum, f.finished)
	}
	if activities != 0 {
		t.Fatalf("%d activities beside start and finish: a pool run routes its batches into Postgres", activities)
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
		t.Errorf("leases routed past the window of 2 batches per node: %v", f.overWindow)
	}
	for _, l := range f.leases {
		if l.Assign == nil || l.Assign.Window != 2 || l.Assign.CampaignID == "" {
			t.Fatalf("lease request %+v, want it to route into Postgres with the window", l)
		}
	}
	st := queryStatus(t, env)
	if st.Counters.Fetched != 60 {
		t.Errorf("status counts %d fetched, want 60", st.Counters.Fetched)
	}
	for _, n := range st.Nodes {
		if n.Fetched != sum.PerNode[n.ID] || n.BatchesSent != f.figures[n.ID].BatchesSent {
			t.Errorf("status says %s fetched %d in %d batches; Postgres %d in %d", n.ID, n.Fetched, n.BatchesSent,
				sum.PerNode[n.ID], f.figures[n.ID].BatchesSent)
		}
	}
}

// TestPoolRunCostsTheSameWithAThousandNodes: the control calls a pool run
// makes, and the size of what each answers (their markers in the
// history), do not grow with the pool: the same crawl on 1,000 nodes makes
// about as many leases and looks at the figures as on 3, and after the
// first membership refresh the registry's answers list only what changed.
func TestPoolRunCostsTheSameWithAThousandNodes(t *testing.T) {
	calls := func(nodes int) (leases, looks, biggestLook, laterMembership int) {
		var infos []campaign.NodeInfo
		for i := range nodes {
			infos = append(infos, alive(fmt.Sprintf("n%04d", i), 1))
		}
		f := newFakeCluster(400, 20, infos...)
		f.window = 4
		env := newPoolEnv(t, f)
		spec := testSpec()
		spec.Dispatch.WindowPerNode = 4
		spec.Dispatch.MembershipRefresh = campaign.Duration(time.Second)
		run(t, env, spec)
		if f.fetched != 8000 {
			t.Fatalf("%d nodes fetched %d of 8000", nodes, f.fetched)
		}
		for _, m := range f.memberships[1:] {
			laterMembership += len(m)
		}
		// The last look reads every node, once, as the campaign ends.
		return len(f.leases), len(f.progress), slices.Max(append([]int{0}, f.progressSize[:len(f.progressSize)-1]...)), laterMembership
	}
	l3, p3, _, m3 := calls(3)
	l1000, p1000, big, m1000 := calls(1000)
	t.Logf("3 nodes: %d leases, %d looks; 1,000 nodes: %d leases, %d looks, largest look %d bytes", l3, p3, l1000, p1000, big)
	if float64(l1000) > 1.5*float64(l3) || float64(p1000) > 1.5*float64(max(p3, 1)) {
		t.Errorf("1,000 nodes made %d leases and %d looks, 3 nodes %d and %d: the control calls grow with the pool", l1000, p1000, l3, p3)
	}
	if m3 != 0 || m1000 != 0 {
		t.Errorf("membership refreshes of a quiet pool listed %d and %d nodes after the first: want none", m3, m1000)
	}
	if big > progressLimit*300 {
		t.Errorf("a look at the figures of 1,000 nodes answered %d bytes: it must list at most %d nodes", big, progressLimit)
	}
}

// TestPoolRunMovesADeadNodesHosts: a node that dies (the registry says so)
// leaves the ring; its batches that it never fetched go back at once and
// its hosts go to their next owners; the campaign completes with every
// page.
func TestPoolRunMovesADeadNodesHosts(t *testing.T) {
	f := newFakeCluster(30, 4, alive("a", 1), alive("b", 1))
	f.holdAfter = 40
	f.stalled = map[string]bool{"b": true} // b hangs with what it holds, then dies
	env := newPoolEnv(t, f)
	midCampaignFor(env, f, 3*time.Second, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.nodes = []campaign.NodeInfo{alive("a", 1), {ID: "b", Weight: 1, Incarnation: "b-1"}, alive("d", 3)}
	})
	spec := testSpec()
	spec.Dispatch.MembershipRefresh = campaign.Duration(time.Second)
	run(t, env, spec)
	if f.fetched != 120 {
		t.Fatalf("fetched %d of 120", f.fetched)
	}
	if len(f.queued) != 0 {
		t.Fatalf("%d batches left queued", len(f.queued))
	}
	if !slices.ContainsFunc(f.nodeReleases, func(r campaign.ReleaseNodeBatchesRequest) bool {
		return slices.Equal(r.Nodes, []string{"b"}) && r.Lease == 0
	}) {
		t.Fatalf("hand-backs %+v: the dead node's batches were not handed back", f.nodeReleases)
	}
	if offeredTo(f.leasedAfter, "b") || !offeredTo(f.leasedAfter, "d") {
		t.Fatalf("after the refresh the leases' rings held b %v and d %v; want only d", offeredTo(f.leasedAfter, "b"), offeredTo(f.leasedAfter, "d"))
	}
	wantDiedAndJoined(t, f.changes)
}

// TestPoolRunDrainsANode: a drained node gets no batch after the drain's
// answer (which names the batches it was sent), finishes what it holds,
// and shows drained.
func TestPoolRunDrainsANode(t *testing.T) {
	f := newFakeCluster(30, 4, alive("a", 1), alive("b", 1))
	f.holdAfter = 40
	f.stalled = map[string]bool{"b": true} // b still holds its batches when drained
	env := newPoolEnv(t, f)
	var answer campaign.NodeStatus
	var atDrain int
	midCampaignFor(env, f, 3*time.Second, func() {
		env.UpdateWorkflow(campaign.Drain, "drain-b", &testsuite.TestUpdateCallback{
			OnReject: func(err error) { t.Errorf("drain rejected: %v", err) },
			OnAccept: func() {},
			OnComplete: func(v any, err error) {
				if err != nil {
					t.Errorf("drain: %v", err)
					return
				}
				answer = v.(campaign.NodeStatus)
				f.mu.Lock()
				atDrain = len(f.leases)
				delete(f.stalled, "b") // b fetches what it holds from now on
				f.mu.Unlock()
			},
		}, campaign.NodeRequest{Node: "b"})
	})
	run(t, env, testSpec())
	if f.fetched != 120 {
		t.Fatalf("fetched %d of 120", f.fetched)
	}
	if answer.State != campaign.NodeDraining || answer.InflightBatches == 0 {
		t.Errorf("the drain answered %+v: want b draining with its batches in flight", answer)
	}
	if offeredTo(f.leases[atDrain:], "b") {
		t.Errorf("leases after the drain routed to b")
	}
	st := queryStatus(t, env)
	for _, n := range st.Nodes {
		if n.ID == "b" && (n.State != campaign.NodeDrained || n.BatchesSent != answer.BatchesSent) {
			t.Errorf("b at the end: %s with %d batches sent; at the drain %d", n.State, n.BatchesSent, answer.BatchesSent)
		}
	}
	if !slices.ContainsFunc(f.changes, func(c campaign.RingChange) bool { return c.Node == "b" && c.Reason == reasonDrainDone }) {
		t.Errorf("ring changes %+v: want b's drain completed", f.changes)
	}
}

// TestPoolRunContinuesAsNewWithSmallState: a pool run of 1,000 nodes
// continues as new with a carry of a few dozen bytes per node, and the
// next run's counters go on from there without counting anything twice.
func TestPoolRunContinuesAsNewWithSmallState(t *testing.T) {
	var infos []campaign.NodeInfo
	for i := range 1000 {
		infos = append(infos, alive(fmt.Sprintf("n%04d", i), 1))
	}
	f := newFakeCluster(200, 6, infos...)
	f.holdAfter = 600
	env := newPoolEnv(t, f)
	env.RegisterDelayedCallback(func() { env.SetContinueAsNewSuggested(true) }, 5*time.Second)
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
	doc, _ := json.Marshal(carry)
	t.Logf("carry of 1,000 nodes: %d bytes", len(doc))
	if len(carry.Nodes) != 1000 || len(doc) > 1000*90 {
		t.Fatalf("carry of %d nodes in %d bytes: want every node, in under 90 bytes each", len(carry.Nodes), len(doc))
	}
	if carry.PoolTotals == nil || int64(carry.PoolTotals.Fetched) != carry.Counters.Fetched || carry.Counters.Fetched == 0 {
		t.Fatalf("carry counters %+v, totals %+v: want the totals the counters came from", carry.Counters, carry.PoolTotals)
	}

	f.mu.Lock()
	f.released = true
	f.mu.Unlock()
	env2 := newPoolEnv(t, f)
	env2.ExecuteWorkflow(campaign.WorkflowType, spec, carry)
	if err := env2.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	st := queryStatus(t, env2)
	if st.Counters.Fetched != 1200 || f.fetched != 1200 {
		t.Fatalf("status counts %d fetched across the runs, Postgres %d; want 1200 each", st.Counters.Fetched, f.fetched)
	}
}

// TestPoolRunDrainsANodeThatNeverHadWork: a node that no lease ever
// routed to has no figures in Postgres; drained, it must still show
// drained (it holds nothing), not draining for ever.
func TestPoolRunDrainsANodeThatNeverHadWork(t *testing.T) {
	f := newFakeCluster(30, 4, alive("a", 1), alive("idle", 0.000001))
	f.holdAfter = 40
	env := newPoolEnv(t, f)
	midCampaignFor(env, f, 3*time.Second, func() {
		env.SignalWorkflow(campaign.Drain, campaign.NodeRequest{Nodes: []string{"idle"}})
	})
	run(t, env, testSpec())
	if f.figures["idle"] != nil {
		t.Fatalf("idle got batches: %+v", f.figures["idle"])
	}
	for _, n := range queryStatus(t, env).Nodes {
		if n.ID == "idle" && n.State != campaign.NodeDrained {
			t.Errorf("the idle node is %s after its drain, want drained", n.State)
		}
	}
}

// TestPoolRunDrainsManyNodesAtOnce: one signal drains more nodes than a
// look at the figures lists; each shows drained in its turn.
func TestPoolRunDrainsManyNodesAtOnce(t *testing.T) {
	var infos []campaign.NodeInfo
	var drained []string
	for i := range 3 * progressLimit {
		id := fmt.Sprintf("n%03d", i)
		infos = append(infos, alive(id, 1))
		if i%3 != 0 {
			drained = append(drained, id)
		}
	}
	f := newFakeCluster(60, 20, infos...)
	f.holdAfter = 100
	env := newPoolEnv(t, f)
	midCampaignFor(env, f, 10*time.Second, func() {
		env.SignalWorkflow(campaign.Drain, campaign.NodeRequest{Nodes: drained})
	})
	var midway campaign.Status
	env.RegisterDelayedCallback(func() { midway = queryStatus(t, env) }, 9*time.Second)
	run(t, env, testSpec())
	states := map[string]int{}
	for _, n := range midway.Nodes {
		if slices.Contains(drained, n.ID) {
			states[n.State]++
		}
	}
	if states[campaign.NodeDrained] != len(drained) {
		t.Errorf("8.5 s after the drain of %d nodes: %v, want all drained", len(drained), states)
	}
}
