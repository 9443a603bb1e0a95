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
	nodeQueuePrefix     = "spiderpool.node."

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
// A namespace must register them (the dev stack does; see README for a
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

// NodeQueue is the task queue a node polls for its fetch batches.
func NodeQueue(nodeID string) string { return nodeQueuePrefix + nodeID }

// Activity names, registered by the node worker.
const (
	StartCampaignActivity     = "StartCampaign"
	LeaseBatchActivity        = "LeaseBatch"
	FetchBatchActivity        = "FetchBatch"
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

// NodeRequest is the argument of drain and undrain.
type NodeRequest struct {
	Node string `json:"node"`
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

// LeaseRequest asks for a batch of due URLs.
type LeaseRequest struct {
	CampaignKey int64    `json:"campaign_key"`
	Limit       int      `json:"limit"`
	PerHost     int      `json:"per_host"`
	TTL         Duration `json:"ttl"`
	// MaxPages is the campaign cap (0: none); leases never admit more URLs.
	MaxPages int64 `json:"max_pages"`
}

// Lease is a set of URLs now leased to the campaign, grouped by shard key so
// the workflow routes each group once.
type Lease struct {
	LeaseID int64        `json:"lease_id"`
	Groups  []LeaseGroup `json:"groups,omitempty"`
	// Pending counts URLs waiting, due or not, after this lease.
	Pending int64 `json:"pending"`
	// LeasedElsewhere counts URLs held by other leases.
	LeasedElsewhere int64 `json:"leased_elsewhere"`
	// NextDue is how long until the earliest pending URL or lease expiry,
	// when nothing is due now.
	NextDue Duration `json:"next_due"`
	// BudgetExhausted is set when MaxPages admits no more URLs.
	BudgetExhausted bool `json:"budget_exhausted"`
}

// Size is the number of URLs in the lease.
func (l Lease) Size() int {
	n := 0
	for _, g := range l.Groups {
		n += len(g.IDs)
	}
	return n
}

// LeaseGroup is the leased URLs of one shard key.
type LeaseGroup struct {
	ShardKey string  `json:"k"`
	IDs      []int64 `json:"ids"`
}

// FetchBatchRequest hands leased URLs to a node.
type FetchBatchRequest struct {
	CampaignID  string  `json:"campaign_id"`
	CampaignKey int64   `json:"campaign_key"`
	LeaseID     int64   `json:"lease_id"`
	Node        string  `json:"node"`
	IDs         []int64 `json:"ids"`
	// Route counts how many times this batch moved to another node, and
	// Attempt how many times it was retried on this one; together they make
	// each scheduling's claim its own.
	Route   int `json:"route"`
	Attempt int `json:"attempt"`
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

// ReleaseRequest returns still-leased URLs of a batch to pending.
type ReleaseRequest struct {
	CampaignKey int64   `json:"campaign_key"`
	LeaseID     int64   `json:"lease_id"`
	IDs         []int64 `json:"ids"`
}

// MembershipRequest reads the node registry.
type MembershipRequest struct {
	// Only, when set, restricts the answer to these node IDs.
	Only []string `json:"only,omitempty"`
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
}

// Node states in the campaign's ring.
const (
	NodeActive   = "active"
	NodeDraining = "draining" // no new batches; in-flight ones finish
	NodeDrained  = "drained"  // draining with nothing in flight: safe to stop
	NodeSuspect  = "suspect"  // a batch timed out on it; out of the ring until it proves alive
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
}

// Counters are the workflow's running totals, from batch results.
type Counters struct {
	// Seeds is how many seed URLs the start inserted; with Discovered, the
	// URLs the campaign knows of.
	Seeds      int64 `json:"seeds"`
	Leased     int64 `json:"leased"`
	Fetched    int64 `json:"fetched"`
	Failed     int64 `json:"failed"`
	Retried    int64 `json:"retried"`
	Excluded   int64 `json:"excluded"`
	Discovered int64 `json:"discovered"`
	Bytes      int64 `json:"bytes"`
	Batches    int64 `json:"batches"`
	Rerouted   int64 `json:"rerouted"`
}

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
}

// CarriedNode is a node's campaign state across continue-as-new.
type CarriedNode struct {
	ID          string   `json:"id"`
	Weight      float64  `json:"weight"`
	Override    *float64 `json:"override,omitempty"`
	Drain       bool     `json:"drain,omitempty"`
	Health      string   `json:"health"`
	Incarnation string   `json:"incarnation"`
	SuspectFor  int      `json:"suspect_for,omitempty"`
	// Adaptive is the factor adaptive weights apply (1 when off), and
	// LatencyMs and ErrorRate the moving averages it is computed from.
	Adaptive    float64 `json:"adaptive,omitempty"`
	LatencyMs   float64 `json:"latency_ms,omitempty"`
	ErrorRate   float64 `json:"error_rate,omitempty"`
	Samples     int64   `json:"samples,omitempty"`
	BatchesSent int64   `json:"batches_sent"`
	Fetched     int64   `json:"fetched"`
	Failed      int64   `json:"failed"`
}
