package campaign

import "slices"

// A pool run (the campaign workflow's hostFlowChange version 2) routes each
// lease's batches into Postgres (node_batches), where nodes take them, in
// place of a FetchBatch activity per batch: the workflow's history then
// costs the same per page on 3 nodes as on 1,000. The contract of that
// arrangement is here.

// Node capabilities, declared in the registry.
const (
	// CapPull: the node takes its batches from Postgres (pool runs).
	CapPull = "pull"
)

// CampaignProgressActivity reads a pool run's figures from Postgres.
const CampaignProgressActivity = "CampaignProgress"

// ReleaseNodeBatchesActivity hands back what nodes that left a pool run's
// ring were routed and have not fetched.
const ReleaseNodeBatchesActivity = "ReleaseNodeBatches"

// Assign makes a LeaseHostsRequest route its batches into Postgres for the
// nodes to take, instead of returning them (a pool run).
type Assign struct {
	// CampaignID names the campaign in each batch, for the nodes' logs.
	CampaignID string `json:"campaign_id"`
	// Window is how many batches of the campaign a node may hold, queued
	// or running; a lease routes to a node only as many as it has room for.
	Window int `json:"window"`
	// HandBackAfter and BodyChunks go into each batch (FetchBatchRequest).
	HandBackAfter Duration `json:"hand_back_after"`
	BodyChunks    bool     `json:"body_chunks,omitempty"`
}

// Routed says what a lease with Assign routed: how many batches and URLs,
// to how many nodes. The batches themselves stay in Postgres.
type Routed struct {
	Batches int `json:"batches"`
	URLs    int `json:"urls"`
	Nodes   int `json:"nodes"`
}

// ProgressRequest asks for a pool run's figures.
type ProgressRequest struct {
	CampaignKey int64 `json:"campaign_key"`
	// Known are the figures the run last heard of each node: only nodes
	// whose figures differ are listed in the answer. Not recorded (a local
	// activity's input), so it may be as long as the pool.
	Known []NodeFigures `json:"known,omitempty"`
	// First are nodes to list first if their figures changed (those
	// draining, whose state waits on them).
	First []string `json:"first,omitempty"`
	// After: the others are listed in turn, from the first ID after this.
	After string `json:"after,omitempty"`
	// Limit bounds the nodes listed, and with them the answer's size in
	// the history, however large the pool.
	Limit int `json:"limit"`
}

// Progress is a pool run's figures: totals over every node, and the
// figures of nodes that changed (at most ProgressRequest.Limit of them).
type Progress struct {
	Totals BatchResult   `json:"totals"`
	Nodes  []NodeFigures `json:"nodes,omitempty"`
	// After is where the next request's turn starts.
	After string `json:"after,omitempty"`
}

// NodeFigures are one node's figures in one campaign.
type NodeFigures struct {
	ID string `json:"id"`
	// BatchesSent and URLsSent count what leases routed to it.
	BatchesSent int64 `json:"batches_sent,omitempty"`
	// InflightBatches and InflightURLs are what it holds now, queued or
	// running.
	InflightBatches int   `json:"inflight_batches,omitempty"`
	InflightURLs    int   `json:"inflight_urls,omitempty"`
	Fetched         int64 `json:"fetched,omitempty"`
	Failed          int64 `json:"failed,omitempty"`
	Requests        int64 `json:"requests,omitempty"`
	RequestMillis   int64 `json:"request_ms,omitempty"`
	TransportErrors int64 `json:"transport_errors,omitempty"`
}

// ReleaseNodeBatchesRequest hands back what the nodes hold of a campaign
// and have not claimed (queued batches, and claims of holders that are no
// longer alive); with Lease set, only that lease's batches.
type ReleaseNodeBatchesRequest struct {
	CampaignKey int64    `json:"campaign_key"`
	Nodes       []string `json:"nodes"`
	Lease       int64    `json:"lease,omitempty"`
}

// ChangedFigures picks, of every node's figures (sorted by ID), those that
// differ from req.Known: those of req.First (zero for a node without
// figures), then the others in turn from
// the first ID after req.After, wrapping, at most req.Limit in all (all of
// them when Limit is 0). It returns them, and where the next turn starts.
func ChangedFigures(figures []NodeFigures, req ProgressRequest) ([]NodeFigures, string) {
	known := make(map[string]NodeFigures, len(req.Known))
	for _, k := range req.Known {
		known[k.ID] = k
	}
	changed := func(f NodeFigures) bool {
		k, ok := known[f.ID]
		return !ok || k != f
	}
	limit := req.Limit
	if limit <= 0 {
		limit = len(figures)
	}
	var out []NodeFigures
	picked := map[string]bool{}
	for _, f := range figures { // sorted by ID
		if len(out) < limit && slices.Contains(req.First, f.ID) && changed(f) {
			out = append(out, f)
			picked[f.ID] = true
		}
	}
	// A node asked for first that has no figures (no lease ever routed to
	// it) holds nothing: its figures are zero.
	for _, id := range req.First {
		if len(out) < limit && !picked[id] && !slices.ContainsFunc(figures, func(f NodeFigures) bool { return f.ID == id }) &&
			changed(NodeFigures{ID: id}) {
			out = append(out, NodeFigures{ID: id})
			picked[id] = true
		}
	}
	start, _ := slices.BinarySearchFunc(figures, req.After, func(f NodeFigures, id string) int {
		if f.ID <= id {
			return -1
		}
		return 1
	})
	after := req.After
	for i := range len(figures) {
		if len(out) == limit {
			break
		}
		f := figures[(start+i)%len(figures)]
		if picked[f.ID] || !changed(f) {
			continue
		}
		out = append(out, f)
		after = f.ID
	}
	return out, after
}

// MembershipChanges lists what a pool run must learn of the registry: the
// nodes that differ from known (a node that cannot pull counts as not
// alive), and the known nodes gone from the registry. Capabilities are
// left out of the answer: they are in the history otherwise, and the run
// has no use for them.
func MembershipChanges(registry, known []NodeInfo) []NodeInfo {
	byID := make(map[string]NodeInfo, len(known))
	for _, k := range known {
		byID[k.ID] = k
	}
	var out []NodeInfo
	seen := make(map[string]bool, len(registry))
	for _, n := range registry {
		seen[n.ID] = true
		n.Alive = n.Alive && slices.Contains(n.Capabilities, CapPull)
		n.Capabilities, n.Version = nil, ""
		k, ok := byID[n.ID]
		switch {
		case !ok && !n.Alive:
			continue // never a member, and not one now
		case ok && k.Alive == n.Alive && k.Weight == n.Weight && k.Incarnation == n.Incarnation:
			continue
		}
		out = append(out, n)
	}
	for _, k := range known {
		if !seen[k.ID] {
			out = append(out, NodeInfo{ID: k.ID, Gone: true})
		}
	}
	return out
}
