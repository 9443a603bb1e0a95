package workflows

import (
	"fmt"
	"slices"
	"strings"

	"go.temporal.io/sdk/workflow"

	"github.com/spiderpool/spiderpool/campaign"
)

// Node health comes from the node registry only: a node's own heartbeat,
// which it renews while it reaches Postgres and Temporal. How long a
// node's queue takes, or how busy it is, never makes it dead.
const (
	healthy = "ok"
	dead    = "dead" // the registry says so
)

type node struct {
	id          string
	weight      float64  // as registered
	override    *float64 // set by the reweight signal; wins over weight
	drain       bool     // set by the drain signal
	health      string
	incarnation string
	adaptive    float64 // factor on weight from adaptive weights; 0 means 1
	latencyMs   float64 // moving average of request time
	errorRate   float64 // moving average of requests with no answer
	samples     int64
	inflight    int
	inflightN   int
	batchesSent int64
	fetched     int64
	failed      int64
	// reported is what a pool run's last look at the figures said of the
	// node (heard: it said something), already added to batchesSent,
	// fetched, failed, inflight and the averages.
	reported campaign.NodeFigures
	heard    bool
}

// carried is the node's state for the next run. Of its figures only what
// Postgres does not keep goes on: the next run hears the rest again.
func (n *node) carried() campaign.CarriedNode {
	return campaign.CarriedNode{
		ID: n.id, Weight: n.weight, Override: n.override, Drain: n.drain, Health: n.health,
		Incarnation: n.incarnation, BatchesSent: n.batchesSent - n.reported.BatchesSent,
		Fetched: n.fetched - n.reported.Fetched, Failed: n.failed - n.reported.Failed,
		Adaptive: n.adaptive, LatencyMs: n.latencyMs, ErrorRate: n.errorRate, Samples: n.samples,
	}
}

// nodeFromCarry is carried's inverse: a node is healthy or dead, as the
// registry last said.
func nodeFromCarry(c campaign.CarriedNode) *node {
	health := c.Health
	if health != dead {
		health = healthy
	}
	return &node{
		id: c.ID, weight: c.Weight, override: c.Override, drain: c.Drain, health: health,
		incarnation: c.Incarnation, batchesSent: c.BatchesSent, fetched: c.Fetched, failed: c.Failed,
		adaptive: c.Adaptive, latencyMs: c.LatencyMs, errorRate: c.ErrorRate, samples: c.Samples,
	}
}

// state is what status shows and node_weight_history records.
func (n *node) state() string {
	switch {
	case n.health == dead:
		return campaign.NodeDead
	case n.drain && n.inflight > 0:
		return campaign.NodeDraining
	case n.drain:
		return campaign.NodeDrained
	}
	return campaign.NodeActive
}

// effectiveWeight is the node's weight in the ring: 0 unless active; the
// operator's weight if set; else the registered one, scaled by adaptive
// weights.
func (n *node) effectiveWeight() float64 {
	if n.state() != campaign.NodeActive {
		return 0
	}
	if n.override != nil {
		return *n.override
	}
	return n.weight * n.factor()
}

func (n *node) factor() float64 {
	if n.adaptive == 0 {
		return 1
	}
	return n.adaptive
}

// Adaptive weights: moving averages per node (weight ewmaAlpha per batch),
// used once a node has adaptiveMinSamples requests; a factor of
// score/mean score, clamped to [1/4, 4], applied when it moves by more
// than adaptiveHysteresis.
const (
	ewmaAlpha          = 0.3
	adaptiveMinSamples = 50
	adaptiveHysteresis = 0.25
	reasonAdaptive     = "adaptive weights"
)

// observe folds a batch's request figures into the node's averages.
func (n *node) observe(r campaign.BatchResult) {
	if r.Requests == 0 {
		return
	}
	lat := float64(r.RequestMillis) / float64(r.Requests)
	errs := float64(r.TransportErrors) / float64(r.Requests)
	if n.samples == 0 {
		n.latencyMs, n.errorRate = lat, errs
	} else {
		n.latencyMs = (1-ewmaAlpha)*n.latencyMs + ewmaAlpha*lat
		n.errorRate = (1-ewmaAlpha)*n.errorRate + ewmaAlpha*errs
	}
	n.samples += int64(r.Requests)
}

// adapt rescales active nodes' weights by their health relative to the
// others: faster and more reliable nodes get more hosts.
func (d *dispatcher) adapt() {
	type cand struct {
		n     *node
		score float64
	}
	var cs []cand
	total := 0.0
	for _, id := range d.order {
		n := d.nodes[id]
		if n.state() != campaign.NodeActive || n.override != nil || n.samples < adaptiveMinSamples {
			continue
		}
		s := (1 - n.errorRate) / max(n.latencyMs, 1)
		cs = append(cs, cand{n, s})
		total += s
	}
	if len(cs) < 2 || total == 0 {
		return
	}
	mean := total / float64(len(cs))
	for _, c := range cs {
		f := min(max(c.score/mean, 0.25), 4)
		if cur := c.n.factor(); abs(f-cur)/cur > adaptiveHysteresis {
			d.mutate(c.n, reasonAdaptive, func() { c.n.adaptive = f })
		}
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// addNode adds n to the node table. Routing is the lease's, in Postgres
// (store.LeaseHosts): the run sends it the members and their weights.
func (d *dispatcher) addNode(n *node) {
	d.nodes[n.id] = n
	i, _ := slices.BinarySearch(d.order, n.id)
	d.order = slices.Insert(d.order, i, n.id)
}

// mutate applies change to n and, if its ring weight or state moved,
// updates the ring and appends a node_weight_history row.
func (d *dispatcher) mutate(n *node, reason string, change func()) {
	oldWeight, oldState := n.effectiveWeight(), n.state()
	change()
	if n.effectiveWeight() == oldWeight && n.state() == oldState {
		return
	}
	if d.leasing && oldWeight > 0 && n.effectiveWeight() == 0 {
		d.leftDuringLease = append(d.leftDuringLease, n.id)
	}
	d.changes = append(d.changes, campaign.RingChange{
		Node: n.id, OldWeight: oldWeight, NewWeight: n.effectiveWeight(), OldState: oldState, NewState: n.state(),
		Reason: reason, AfterLease: d.dispatchedLease,
	})
	d.leaseDry = false // the window may have room again
}

// refreshMembership reads the registry in a local activity (recorded, so
// replay sees the same answer) and adjusts the ring; the next refresh is
// timed from its end, so a slow or failing registry never stacks reads.
func (d *dispatcher) refreshMembership() {
	req := campaign.MembershipRequest{Only: d.spec.Nodes, Known: d.known()}
	f := workflow.ExecuteLocalActivity(d.localOptions(), campaign.RefreshMembershipActivity, req)
	d.sel.AddFuture(f, func(f workflow.Future) {
		var infos []campaign.NodeInfo
		err := f.Get(d.ctx, &infos)
		if err != nil {
			// Refreshed again when control calls are retried, not by
			// a timer of its own.
			d.controlFailed(callMembership, err)
			d.out.membershipDue = true
			return
		}
		d.controlSucceeded(callMembership)
		d.applyMembershipChanges(infos)
		d.scheduleMembershipTimer()
	})
}

func (d *dispatcher) scheduleMembershipTimer() {
	d.sel.AddFuture(workflow.NewTimer(d.ctx, d.spec.Dispatch.MembershipRefresh.D()), func(f workflow.Future) {
		if f.Get(d.ctx, nil) != nil {
			return // cancelled
		}
		if d.holdingBack(callMembership) {
			d.out.membershipDue = true // when its wait is over
			return
		}
		d.refreshMembership()
	})
}

// applyNodeInfo takes what the registry says of one node.
func (d *dispatcher) applyNodeInfo(info campaign.NodeInfo) {
	n, ok := d.nodes[info.ID]
	switch {
	case !ok && info.Alive:
		n = &node{id: info.ID, health: dead, weight: info.Weight, incarnation: info.Incarnation}
		d.addNode(n)
		d.mutate(n, reasonJoined, func() { n.health = healthy })
		return
	case !ok:
		return
	case info.Gone:
		if n.health != dead {
			d.died(n, reasonLeft)
		}
		return
	}
	if n.weight != info.Weight {
		d.mutate(n, reasonRegistry, func() { n.weight = info.Weight })
	}
	switch {
	case !info.Alive && n.health != dead:
		d.died(n, reasonDied)
	case info.Alive && n.health == dead:
		d.mutate(n, reasonRejoined, func() { n.health = healthy })
	}
	n.incarnation = info.Incarnation
}

// died takes a node the registry gave up on out of the ring and cancels
// its batches: one never picked up ends at once, and its URLs go back to
// the frontier for the hosts' new owners. Late reports from it are not
// awaited.
func (d *dispatcher) died(n *node, reason string) {
	d.mutate(n, reason, func() { n.health = dead })
	d.releaseNodeBatches([]string{n.id}, 0, reason)
}

func (d *dispatcher) registerHandlers() error {
	ctx := d.ctx
	if err := workflow.SetQueryHandler(ctx, campaign.StatusQuery, func() (campaign.Status, error) {
		return d.status(), nil
	}); err != nil {
		return err
	}
	reweight := func(ctx workflow.Context, r campaign.ReweightRequest) (campaign.NodeStatus, error) {
		return d.applyUpdate(ctx, campaign.Reweight, r.Node, r.Weight)
	}
	validateReweight := func(ctx workflow.Context, r campaign.ReweightRequest) error {
		return d.check(campaign.Reweight, r.Node, r.Weight)
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, campaign.Reweight, reweight,
		workflow.UpdateHandlerOptions{Validator: validateReweight}); err != nil {
		return err
	}
	for _, op := range []string{campaign.Drain, campaign.Undrain} {
		handler := func(ctx workflow.Context, r campaign.NodeRequest) (campaign.NodeStatus, error) {
			return d.applyUpdate(ctx, op, r.Node, nil)
		}
		validator := func(ctx workflow.Context, r campaign.NodeRequest) error {
			if len(r.Nodes) > 0 {
				return &campaign.FieldError{Field: "nodes", Problem: "an update changes one node; send the " + op + " signal to change several at once"}
			}
			return d.check(op, r.Node, nil)
		}
		if err := workflow.SetUpdateHandlerWithOptions(ctx, op, handler, workflow.UpdateHandlerOptions{Validator: validator}); err != nil {
			return err
		}
	}
	if err := d.registerAddURLs(); err != nil {
		return err
	}
	for _, op := range []string{campaign.Pause, campaign.Resume} {
		if err := workflow.SetUpdateHandler(ctx, op, func(ctx workflow.Context) (campaign.Status, error) {
			_, err := d.apply(op, "", nil)
			return d.status(), err
		}); err != nil {
			return err
		}
	}

	// The same operations as signals, for `temporal workflow signal`: a
	// signal cannot answer, so a rejected one is logged and kept in status.
	d.sel.AddReceive(workflow.GetSignalChannel(ctx, campaign.Reweight), func(c workflow.ReceiveChannel, _ bool) {
		var r campaign.ReweightRequest
		c.Receive(ctx, &r)
		d.signal(campaign.Reweight, r.Node, r.Weight)
	})
	for _, op := range []string{campaign.Drain, campaign.Undrain} {
		d.sel.AddReceive(workflow.GetSignalChannel(ctx, op), func(c workflow.ReceiveChannel, _ bool) {
			var r campaign.NodeRequest
			c.Receive(ctx, &r)
			d.signalNodes(op, r)
		})
	}
	for _, op := range []string{campaign.Pause, campaign.Resume} {
		d.sel.AddReceive(workflow.GetSignalChannel(ctx, op), func(c workflow.ReceiveChannel, _ bool) {
			c.Receive(ctx, nil)
			d.signal(op, "", nil)
		})
	}
	return nil
}

// drainSignals applies signals that arrived but were not yet selected, so
// none is lost across continue-as-new.
func (d *dispatcher) drainSignals() {
	var r campaign.ReweightRequest
	for workflow.GetSignalChannel(d.ctx, campaign.Reweight).ReceiveAsync(&r) {
		d.signal(campaign.Reweight, r.Node, r.Weight)
	}
	for _, op := range []string{campaign.Drain, campaign.Undrain} {
		var nr campaign.NodeRequest
		for workflow.GetSignalChannel(d.ctx, op).ReceiveAsync(&nr) {
			d.signalNodes(op, nr)
		}
	}
	for _, op := range []string{campaign.Pause, campaign.Resume} {
		for workflow.GetSignalChannel(d.ctx, op).ReceiveAsync(nil) {
			d.signal(op, "", nil)
		}
	}
}

// signalNodes applies a drain or undrain signal to each node it names.
func (d *dispatcher) signalNodes(op string, r campaign.NodeRequest) {
	ids := r.IDs()
	if len(ids) == 0 {
		d.signal(op, "", nil) // rejected: it names no node
	}
	for _, id := range ids {
		d.signal(op, id, nil)
	}
}

func (d *dispatcher) signal(op, nodeID string, weight *float64) {
	if _, err := d.apply(op, nodeID, weight); err != nil {
		d.log.Warn("signal rejected", "signal", op, "error", err)
		d.rejected = append(d.rejected, fmt.Sprintf("%s: %v", op, err))
		if len(d.rejected) > 10 {
			d.rejected = d.rejected[len(d.rejected)-10:]
		}
	}
}

// check validates an operation without applying it.
func (d *dispatcher) check(op, nodeID string, weight *float64) error {
	switch op {
	case campaign.Pause, campaign.Resume:
		return nil
	}
	if nodeID == "" {
		return &campaign.FieldError{Field: "node", Problem: "is required"}
	}
	if _, ok := d.nodes[nodeID]; !ok {
		known := "none yet"
		if len(d.order) > 0 {
			known = strings.Join(d.order, ", ")
		}
		return &campaign.FieldError{Field: "node", Problem: fmt.Sprintf("unknown node %q (campaign nodes: %s)", nodeID, known)}
	}
	if op == campaign.Reweight {
		if weight == nil {
			return &campaign.FieldError{Field: "weight", Problem: "is required"}
		}
		if err := campaign.ValidWeight("weight", *weight); err != nil {
			return err
		}
	}
	return nil
}

// applyUpdate is apply for an update, which answers with the node's
// status. A pool run applies it between leases, so no lease under way
// routes by the ring it changes, and answers with the node's figures read
// after the change: a drained node's batches then stay what the answer
// says.
func (d *dispatcher) applyUpdate(ctx workflow.Context, op, nodeID string, weight *float64) (campaign.NodeStatus, error) {
	if err := workflow.Await(ctx, func() bool { return !d.leasing }); err != nil {
		return campaign.NodeStatus{}, err
	}
	st, err := d.apply(op, nodeID, weight)
	if err != nil {
		return st, err
	}
	if err := d.readProgressNow(ctx, []string{nodeID}, 1); err != nil {
		d.log.Warn("reading the node's figures after an update failed; status has them at the next look", "node", nodeID, "error", err)
	}
	return d.nodeStatus(d.nodes[nodeID]), nil
}

// apply performs an operator operation and returns the node's new status.
func (d *dispatcher) apply(op, nodeID string, weight *float64) (campaign.NodeStatus, error) {
	if err := d.check(op, nodeID, weight); err != nil {
		return campaign.NodeStatus{}, err
	}
	d.wake.SendAsync(nil) // let the loop see the change
	reason := reasonSignal + op
	switch op {
	case campaign.Pause:
		d.paused = true
		return campaign.NodeStatus{}, nil
	case campaign.Resume:
		d.paused, d.leaseDry = false, false
		return campaign.NodeStatus{}, nil
	}
	n := d.nodes[nodeID]
	switch op {
	case campaign.Reweight:
		w := *weight
		d.mutate(n, reason, func() { n.override = &w })
	case campaign.Drain:
		d.mutate(n, reason, func() {
			n.drain = true
			// Draining until a look at the figures says it holds
			// nothing: the last one may predate its latest batches.
			n.inflight = max(n.inflight, 1)
		})
	case campaign.Undrain:
		d.mutate(n, reason, func() { n.drain = false })
	}
	return d.nodeStatus(n), nil
}

func (d *dispatcher) nodeStatus(n *node) campaign.NodeStatus {
	return campaign.NodeStatus{
		ID: n.id, Weight: n.weight, Override: n.override, State: n.state(),
		Adaptive: n.adaptive, LatencyMs: n.latencyMs, ErrorRate: n.errorRate,
		InflightBatches: n.inflight, InflightURLs: n.inflightN, BatchesSent: n.batchesSent,
		Fetched: n.fetched, Failed: n.failed,
	}
}

func (d *dispatcher) status() campaign.Status {
	st := campaign.Status{
		CampaignID: d.id, State: d.state, Run: d.run, Counters: d.counters,
		Pending: d.lastLease.Pending, Rejected: d.rejected, Processors: d.processorStatus(),
	}
	if d.paused {
		st.State = "paused"
	}
	for _, id := range d.order {
		n := d.nodes[id]
		st.Nodes = append(st.Nodes, d.nodeStatus(n))
		if w := n.effectiveWeight(); w > 0 {
			st.Ring = append(st.Ring, campaign.RingMember{ID: id, Weight: w})
		}
	}
	return st
}
