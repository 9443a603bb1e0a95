package campaign

import "time"

// Names operators and tools use. The campaign ID is the workflow ID.
const (
	// WorkflowType is the registered name of the campaign workflow, for
	// `temporal workflow start --type CrawlCampaign`.
	WorkflowType = "CrawlCampaign"
	// DefaultControlQueue is where campaign workflows and control activities
	// run; every node polls it.
	DefaultControlQueue = "spiderpool.control"

	// Signals and updates share names; updates validate and answer, signals
	// (for `temporal workflow signal`) apply the same change or record why
	// not in status.
	Reweight = "reweight" // ReweightRequest
	Drain    = "drain"    // NodeRequest
	Undrain  = "undrain"  // NodeRequest
	Pause    = "pause"    // no argument
	Resume   = "resume"   // no argument

	// StatusQuery returns a Status.
	StatusQuery = "status"
)

// Search attributes the workflow upserts, so the Web UI and `temporal
// workflow list --query 'CampaignStatus="Running"'` can filter campaigns.
// A namespace must register them (the dev stack does; see docs/operations.md for a
// cluster); the workflow upserts only those registered when it starts.
const (
	AttrStatus  = "CampaignStatus" // one of the CampaignStatus values below
	AttrFetched = "PagesFetched"
	AttrFailed  = "PagesFailed"
)

// SearchAttributeTypes gives each search attribute's Temporal type, as
// `temporal operator search-attribute create --type` spells it.
var SearchAttributeTypes = map[string]string{
	AttrStatus:  "Keyword",
	AttrFetched: "Int",
	AttrFailed:  "Int",
}

// CampaignStatus values.
const (
	StatusRunning   = "Running"
	StatusPaused    = "Paused"
	StatusCompleted = "Completed"
	StatusCancelled = "Cancelled"
	StatusFailed    = "Failed"
)

// Activity names, registered by the node worker.
const (
	StartCampaignActivity     = "StartCampaign"
	LeaseHostsActivity        = "LeaseHosts"
	ReleaseBatchActivity      = "ReleaseBatch"
	RefreshMembershipActivity = "RefreshMembership"
	RecordRingChangesActivity = "RecordRingChanges"
	FinishCampaignActivity    = "FinishCampaign"
)

// ReweightRequest is the argument of the reweight signal and update.
type ReweightRequest struct {
	Node   string   `json:"node"`
	Weight *float64 `json:"weight"`
}

// NodeRequest is the argument of drain and undrain. A signal may name
// many nodes at once in Nodes (an update changes one, and answers with
// its status).
type NodeRequest struct {
	Node  string   `json:"node"`
	Nodes []string `json:"nodes,omitempty"`
}

// IDs are the nodes the request names, Node first; none if it names none.
func (r NodeRequest) IDs() []string {
	if r.Node == "" {
		return r.Nodes
	}
	return append([]string{r.Node}, r.Nodes...)
}

// StartRequest asks to create (or find) the campaign and seed its frontier.
type StartRequest struct {
	CampaignID string `json:"campaign_id"`
	Spec       Spec   `json:"spec"`
}

// StartResult identifies the campaign's rows.
type StartResult struct {
	CampaignKey   int64 `json:"campaign_key"`
	SeedsInserted int   `json:"seeds_inserted"`
	// Resumed is set when the campaign already existed: a workflow started
	// again under the same ID carries on with its frontier.
	Resumed bool `json:"resumed"`
	// SearchAttributes are the names among AttrStatus, AttrFetched and
	// AttrFailed the namespace has registered: the ones the workflow may
	// upsert (an unregistered one would fail its workflow task).
	SearchAttributes []string `json:"search_attributes,omitempty"`
}

// LeaseGroup is the leased URLs of one shard key.
type LeaseGroup struct {
	ShardKey string  `json:"k"`
	IDs      []int64 `json:"ids"`
}

// LeaseHostsRequest asks for the URLs each host needs to stay busy, for
// the nodes with room in their window. The lease routes them: each host
// goes to its owner on the ring of Nodes.
type LeaseHostsRequest struct {
	CampaignKey int64 `json:"campaign_key"`
	// Nodes are the ring's members (effective weights) and how many more
	// batches each may take now.
	Nodes []LeaseNode `json:"nodes"`
	// BatchSize caps the URLs of one batch, and of one host in flight.
	BatchSize int `json:"batch_size"`
	// Horizon is how much work to keep in flight for a host, in time: a
	// host gets what it can fetch in about this long at its allowed rate,
	// and more only once half of that is done.
	Horizon Duration `json:"horizon"`
	TTL     Duration `json:"ttl"`
	// MaxPages is the campaign cap (0: none); leases never admit more URLs.
	MaxPages int64 `json:"max_pages"`
	// MinDelay and Concurrency are the campaign's politeness, for hosts
	// whose pace no node has recorded yet.
	MinDelay    Duration `json:"min_delay"`
	Concurrency int      `json:"concurrency"`
	// Assign, set by a pool run (every run of this release), routes the
	// batches into Postgres for the nodes to take; Nodes' Batches are then
	// ignored (the lease counts each node's room itself), and nodes the
	// registry calls dead get nothing. Without it the lease returns the
	// batches, cut to Nodes' Batches: tests lease so without a registry.
	Assign *Assign `json:"assign,omitempty"`
}

// LeaseNode is one ring member in a lease request.
type LeaseNode struct {
	ID     string  `json:"id"`
	Weight float64 `json:"weight"`
	// Batches is how many batches the node's window has room for; a lease
	// with Assign counts it from node_batches, as it sets Browser.
	Batches int `json:"batches"`
	// Browser: the node renders pages (CapBrowser). Only the lease sets
	// it, from the registry; render hosts are routed only to such nodes.
	Browser bool `json:"browser,omitempty"`
}

// HostLease is a LeaseHosts answer: URLs now leased, already cut into one
// batch or more per node.
type HostLease struct {
	LeaseID int64       `json:"lease_id"`
	Batches []NodeBatch `json:"batches,omitempty"`
	// Pending counts URLs waiting, due or not, after this lease, and
	// LeasedElsewhere those held by earlier leases; both are counted only
	// when nothing was leased.
	Pending         int64 `json:"pending"`
	LeasedElsewhere int64 `json:"leased_elsewhere"`
	// NextDue is how long until something is likely due: a host back under
	// its work in flight, a retry, a pause ending, a lease expiring.
	NextDue Duration `json:"next_due"`
	// More is set when a node's room ran out before the hosts due for it:
	// lease again as soon as it has room.
	More bool `json:"more,omitempty"`
	// BudgetExhausted is set when MaxPages admits no more URLs.
	BudgetExhausted bool `json:"budget_exhausted"`
	// ProcessorsWaiting counts, per processor of the campaign, the pages
	// waiting for it (up to its max_pending + 1): fetching holds back on
	// it even while all of the processor's batches are out.
	ProcessorsWaiting map[string]int `json:"processors_waiting,omitempty"`
	// Routed is what a lease with Assign routed into Postgres.
	Routed Routed `json:"routed,omitzero"`
	// RenderWaiting counts the render hosts due that this lease held back
	// for want of a node with a browser: their URLs stay pending.
	RenderWaiting int `json:"render_waiting,omitempty"`
}

// Size is the number of URLs in the lease.
func (l HostLease) Size() int {
	n := 0
	for _, b := range l.Batches {
		n += b.Size()
	}
	return n
}

// NodeBatch is one batch for one node.
type NodeBatch struct {
	Node   string       `json:"node"`
	Groups []LeaseGroup `json:"groups"`
}

// Size is the number of URLs in the batch.
func (b NodeBatch) Size() int {
	n := 0
	for _, g := range b.Groups {
		n += len(g.IDs)
	}
	return n
}

// IDs lists the batch's URL IDs.
func (b NodeBatch) IDs() []int64 {
	ids := make([]int64, 0, b.Size())
	for _, g := range b.Groups {
		ids = append(ids, g.IDs...)
	}
	return ids
}

// FetchBatchRequest is a batch of leased URLs for a node, as it takes it
// from Postgres (node_batches).
type FetchBatchRequest struct {
	CampaignID  string  `json:"campaign_id"`
	CampaignKey int64   `json:"campaign_key"`
	LeaseID     int64   `json:"lease_id"`
	Node        string  `json:"node"`
	IDs         []int64 `json:"ids"`
	// HandBackAfter, when set, bounds the batch's life: what has not
	// started by then goes back to pending, due at once, so one slow host
	// never holds the rest of a batch (and its window slot) for long.
	HandBackAfter Duration `json:"hand_back_after,omitempty"`
	// BodyChunks: the batch's pages are kept for processors in chunks, a
	// commit's in one row.
	BodyChunks bool `json:"body_chunks,omitempty"`
	// Batch is the batch's row in node_batches.
	Batch int64 `json:"batch,omitempty"`
}

// BatchResult is what a fetch batch did: counts only, never pages.
type BatchResult struct {
	Fetched    int   `json:"fetched"`
	Failed     int   `json:"failed"`
	Retried    int   `json:"retried"`
	Excluded   int   `json:"excluded"`
	Discovered int   `json:"discovered"`
	Bytes      int64 `json:"bytes"`
	// Skipped counts IDs this batch no longer held (finished by an earlier
	// attempt, or re-leased after expiry).
	Skipped int `json:"skipped"`
	// Released counts URLs handed back to pending unfetched because the
	// node is stopping.
	Released int `json:"released"`
	// Requests, RequestMillis and TransportErrors describe the node's
	// requests (time on the wire; failures with no answer), for adaptive
	// weights.
	Requests        int   `json:"requests"`
	RequestMillis   int64 `json:"request_ms"`
	TransportErrors int   `json:"transport_errors"`
}

// Sub takes o from r, field by field.
func (r *BatchResult) Sub(o BatchResult) {
	r.Fetched -= o.Fetched
	r.Failed -= o.Failed
	r.Retried -= o.Retried
	r.Excluded -= o.Excluded
	r.Discovered -= o.Discovered
	r.Bytes -= o.Bytes
	r.Skipped -= o.Skipped
	r.Released -= o.Released
	r.Requests -= o.Requests
	r.RequestMillis -= o.RequestMillis
	r.TransportErrors -= o.TransportErrors
}

// Done is the number of URLs the batch settled.
func (r BatchResult) Done() int { return r.Fetched + r.Failed + r.Retried + r.Excluded }

// Add accumulates o into r.
func (r *BatchResult) Add(o BatchResult) {
	r.Fetched += o.Fetched
	r.Failed += o.Failed
	r.Retried += o.Retried
	r.Excluded += o.Excluded
	r.Discovered += o.Discovered
	r.Bytes += o.Bytes
	r.Skipped += o.Skipped
	r.Released += o.Released
	r.Requests += o.Requests
	r.RequestMillis += o.RequestMillis
	r.TransportErrors += o.TransportErrors
}

// ReleaseRequest returns to pending every URL of Leases that no node has
// claimed.
type ReleaseRequest struct {
	CampaignKey int64   `json:"campaign_key"`
	Leases      []int64 `json:"leases,omitempty"`
}

// MembershipRequest reads the node registry.
type MembershipRequest struct {
	// Only, when set, restricts the answer to these node IDs.
	Only []string `json:"only,omitempty"`
	// Known is what the run already knows of the registry: the answer
	// lists only the nodes that differ from it (joined, gone, reweighted,
	// restarted, dead or alive again), so a quiet pool of a thousand nodes
	// costs the history nothing. Not recorded: a local activity's input
	// stays out of the history.
	Known []NodeInfo `json:"known,omitempty"`
}

// NodeInfo is one registered node as the registry sees it.
type NodeInfo struct {
	ID     string  `json:"id"`
	Weight float64 `json:"weight"`
	// Alive is false when the node's heartbeat is older than its TTL or it
	// deregistered.
	Alive bool `json:"alive"`
	// Incarnation changes every time the node process starts.
	Incarnation string `json:"incarnation"`
	Version     string `json:"version,omitempty"`
	// Capabilities say what the node can do (CapPull, CapBrowser); a node
	// without CapPull takes no batches, and answers as not alive.
	Capabilities []string `json:"capabilities,omitempty"`
	// Gone, in an answer, says a known node left the registry.
	Gone bool `json:"gone,omitempty"`
}

// Node states in the campaign's ring.
const (
	NodeActive   = "active"
	NodeDraining = "draining" // no new batches; in-flight ones finish
	NodeDrained  = "drained"  // draining with nothing in flight: safe to stop
	NodeDead     = "dead"     // registry heartbeat expired
)

// RingChange is one row of node_weight_history.
type RingChange struct {
	Node      string  `json:"node"`
	OldWeight float64 `json:"old_weight"`
	NewWeight float64 `json:"new_weight"`
	OldState  string  `json:"old_state"`
	NewState  string  `json:"new_state"`
	Reason    string  `json:"reason"`
	// AfterLease is the last lease dispatched before the change: URLs of
	// later leases were routed with it in effect.
	AfterLease int64 `json:"after_lease"`
}

// RecordRingChangesRequest appends ring changes to node_weight_history.
type RecordRingChangesRequest struct {
	CampaignKey int64        `json:"campaign_key"`
	Run         int          `json:"run"`
	Changes     []RingChange `json:"changes"`
}

// FinishRequest closes the campaign in Postgres.
type FinishRequest struct {
	CampaignKey int64  `json:"campaign_key"`
	Outcome     string `json:"outcome"`
	// ExcludeRest marks still-pending URLs excluded (with this reason) when
	// a limit ended the crawl.
	ExcludeRest string `json:"exclude_rest,omitempty"`
	// Runs is how many workflow runs the campaign took.
	Runs int `json:"runs"`
}

// Outcomes.
const (
	OutcomeCompleted = "completed"
	OutcomeCancelled = "cancelled"
)

// Summary is the campaign's result, computed from Postgres, the truth.
type Summary struct {
	CampaignID string `json:"campaign_id"`
	Outcome    string `json:"outcome"`
	// URLs is every fingerprint in the frontier.
	URLs     int64 `json:"urls"`
	Fetched  int64 `json:"fetched"`
	Failed   int64 `json:"failed"`
	Excluded int64 `json:"excluded"`
	Pending  int64 `json:"pending"`
	Leased   int64 `json:"leased"`
	Pages    int64 `json:"pages"`
	Bytes    int64 `json:"bytes"`
	// PerNode counts pages by the node that fetched them.
	PerNode        map[string]int64 `json:"per_node"`
	StartedAt      time.Time        `json:"started_at"`
	FinishedAt     time.Time        `json:"finished_at"`
	Seconds        float64          `json:"seconds"`
	PagesPerSecond float64          `json:"pages_per_second"`
	Runs           int              `json:"runs"`
	// Unprocessed counts the fetched pages that some processor had still
	// to take when the campaign ended other than completed: their bodies
	// were dropped with the rest, and their URLs went back to pending
	// (counted above as they were before), so a run started again under
	// the campaign's ID fetches them and delivers them then.
	Unprocessed int64 `json:"unprocessed,omitempty"`
}

// Counters are the workflow's running totals, from batch results.
type Counters struct {
	// Seeds is how many seed URLs the start inserted; with Added and
	// Discovered, the URLs the campaign knows of.
	Seeds int64 `json:"seeds"`
	// Added counts the new URLs add_urls updates stored.
	Added      int64 `json:"added,omitempty"`
	Leased     int64 `json:"leased"`
	Fetched    int64 `json:"fetched"`
	Failed     int64 `json:"failed"`
	Retried    int64 `json:"retried"`
	Excluded   int64 `json:"excluded"`
	Discovered int64 `json:"discovered"`
	Bytes      int64 `json:"bytes"`
	Batches    int64 `json:"batches"`
	// Rerouted no longer moves; kept because v0.11.0 nodes carry it.
	Rerouted int64 `json:"rerouted"`
}

// Known is how many URLs the campaign knows of: its seeds, the URLs
// add_urls stored and those found by links. Every URL fetched is one of
// them, so a campaign never shows more fetched than known.
func (c Counters) Known() int64 { return c.Seeds + c.Added + c.Discovered }

// NodeStatus is one node as the campaign sees it.
type NodeStatus struct {
	ID     string  `json:"id"`
	Weight float64 `json:"weight"`
	// Override is the operator's weight, which wins over the registered one.
	Override *float64 `json:"override,omitempty"`
	// Adaptive is the factor adaptive weights apply to the registered
	// weight (1: unchanged); LatencyMs and ErrorRate are what it follows.
	Adaptive        float64 `json:"adaptive,omitempty"`
	LatencyMs       float64 `json:"latency_ms,omitempty"`
	ErrorRate       float64 `json:"error_rate,omitempty"`
	State           string  `json:"state"`
	InflightBatches int     `json:"inflight_batches"`
	InflightURLs    int     `json:"inflight_urls"`
	// BatchesSent counts batches scheduled on the node, ever.
	BatchesSent int64 `json:"batches_sent"`
	Fetched     int64 `json:"fetched"`
	Failed      int64 `json:"failed"`
}

// Status answers the status query.
type Status struct {
	CampaignID string       `json:"campaign_id"`
	State      string       `json:"state"` // starting, running, paused, waiting, finishing
	Run        int          `json:"run"`
	Counters   Counters     `json:"counters"`
	Pending    int64        `json:"pending"`
	Nodes      []NodeStatus `json:"nodes"`
	// Ring is the effective ring: nodes that receive new batches.
	Ring []RingMember `json:"ring"`
	// Rejected lists the latest signals that could not be applied, and why.
	Rejected []string `json:"rejected,omitempty"`
	// Processors are the campaign's processors and their figures.
	Processors []ProcessorStatus `json:"processors,omitempty"`
	// RenderWaiting counts the pending URLs of render hosts while no live
	// node has a browser (store.RenderWaiting). The workflow never sets
	// it: spiderpool campaign status reads it from Postgres.
	RenderWaiting int64 `json:"render_waiting,omitempty"`
}

// RingMember is one node with its effective weight.
type RingMember struct {
	ID     string  `json:"id"`
	Weight float64 `json:"weight"`
}

// Carry is the state a run hands to its continuation.
type Carry struct {
	CampaignKey int64         `json:"campaign_key"`
	Run         int           `json:"run"`
	Counters    Counters      `json:"counters"`
	Nodes       []CarriedNode `json:"nodes"`
	Paused      bool          `json:"paused"`
	Rejected    []string      `json:"rejected,omitempty"`
	// DispatchedLease is the newest lease routed (see RingChange.AfterLease).
	DispatchedLease int64 `json:"dispatched_lease"`
	// SearchAttributes as in StartResult.
	SearchAttributes []string `json:"search_attributes,omitempty"`
	// Orphans are batches a v0.10.0 run handed on, which a v0.11.0 run
	// may still carry: their leases are released as the next run starts.
	Orphans []OrphanBatch `json:"orphans,omitempty"`
	// Changes are ring changes not yet in node_weight_history (Postgres
	// was away when the run ended): the next run writes them.
	Changes []RingChange `json:"changes,omitempty"`
	// Processors carries each processor's counters.
	Processors []ProcessorStatus `json:"processors,omitempty"`
	// PoolTotals are a pool run's totals at its last look (Progress):
	// the next run's counters move by what they move from there.
	PoolTotals *BatchResult `json:"pool_totals,omitempty"`
}

// OrphanBatch is a batch of a v0.10.0 run that no run waits for.
type OrphanBatch struct {
	Seq     int64  `json:"seq"`
	Node    string `json:"node"`
	LeaseID int64  `json:"lease_id"`
}

// CarriedNode is a node's campaign state across continue-as-new.
type CarriedNode struct {
	ID          string   `json:"id"`
	Weight      float64  `json:"weight"`
	Override    *float64 `json:"override,omitempty"`
	Drain       bool     `json:"drain,omitempty"`
	Health      string   `json:"health"`
	Incarnation string   `json:"incarnation"`
	// Adaptive is the factor adaptive weights apply (1 when off), and
	// LatencyMs and ErrorRate the moving averages it is computed from.
	Adaptive    float64 `json:"adaptive,omitempty"`
	LatencyMs   float64 `json:"latency_ms,omitempty"`
	ErrorRate   float64 `json:"error_rate,omitempty"`
	Samples     int64   `json:"samples,omitempty"`
	BatchesSent int64   `json:"batches_sent,omitempty"`
	Fetched     int64   `json:"fetched,omitempty"`
	Failed      int64   `json:"failed,omitempty"`
}
