package control

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/spiderpool/spiderpool/campaign"
)

// Campaigns starts and steers campaign workflows.
type Campaigns struct {
	Client client.Client
	// Queue is the control task queue the nodes poll.
	Queue string
	// Registry, when set, is read when a campaign does not know a node it
	// is asked to steer: until its first membership refresh a campaign
	// knows no node at all, and the registry names those it will take.
	Registry NodeRegistry
}

// NodeRegistry lists the registered nodes; *store.Store is one.
type NodeRegistry interface {
	Nodes(ctx context.Context, only []string) ([]campaign.NodeInfo, error)
}

// ErrNotFound is matched (errors.Is) by the errors for a campaign or node
// that does not exist.
var ErrNotFound = errors.New("not found")

// NotFoundError is a campaign ID with no workflow.
type NotFoundError struct{ Campaign string }

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("no running campaign with ID %q", e.Campaign)
}
func (e *NotFoundError) Is(err error) bool { return err == ErrNotFound }

// UnknownNodeError is a steering command naming a node the campaign does
// not have. It lists the nodes that can be named: the campaign's, or,
// before the campaign has read the node registry, the live registered
// nodes it will take.
type UnknownNodeError struct {
	Campaign, Node string
	// Known are the campaign's nodes; Registered, when the campaign has
	// none yet, the live nodes in the registry (nil if unread).
	Known, Registered []string
}

func (e *UnknownNodeError) Error() string {
	msg := fmt.Sprintf("node: unknown node %q", e.Node)
	switch {
	case len(e.Known) > 0:
		return msg + " (campaign nodes: " + strings.Join(e.Known, ", ") + ")"
	case e.Registered == nil:
		return msg + " (campaign nodes: none yet; it reads the node registry within its first membership refresh)"
	case len(e.Registered) == 0:
		return msg + " (no live node is registered: start one with spiderpool worker --node ID)"
	}
	return msg + " (registered live nodes: " + strings.Join(e.Registered, ", ") + ")"
}

func (e *UnknownNodeError) Is(err error) bool { return err == ErrNotFound }

// NewCampaignID returns a readable, unique campaign ID such as
// crawl-20261202-143005-9f3a.
func NewCampaignID(now time.Time) string {
	b := make([]byte, 2)
	_, _ = rand.Read(b)
	return "crawl-" + now.UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b)
}

// Start validates spec and starts its workflow under the campaign ID. An
// invalid spec is refused here, with every problem named, before anything
// runs. The workflow's input is the normalised spec, every default filled
// in, so that the Web UI shows what the campaign runs with ("max_redirects":
// 5, not 0); the workflow normalises its input again, which changes nothing
// of a normal spec and fills a raw one (temporal workflow start) alike.
func (c *Campaigns) Start(ctx context.Context, id string, spec campaign.Spec) (client.WorkflowRun, error) {
	spec, err := spec.Normalize()
	if err != nil {
		return nil, fmt.Errorf("invalid campaign spec:\n%w", err)
	}
	run, err := c.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                       id,
		TaskQueue:                c.Queue,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		StaticSummary:            fmt.Sprintf("crawl of %d seed(s), from %s", len(spec.Seeds), firstSeed(spec)),
	}, campaign.WorkflowType, spec)
	if err != nil {
		var started *serviceerror.WorkflowExecutionAlreadyStarted
		if errors.As(err, &started) {
			return nil, fmt.Errorf("campaign %s is already running", id)
		}
		return nil, fmt.Errorf("start campaign %s: %w", id, err)
	}
	return run, nil
}

func firstSeed(s campaign.Spec) string {
	if len(s.Seeds) == 0 {
		return "nothing"
	}
	return s.Seeds[0]
}

// Status asks a running campaign for its status.
func (c *Campaigns) Status(ctx context.Context, id string) (campaign.Status, error) {
	var st campaign.Status
	v, err := c.Client.QueryWorkflow(ctx, id, "", campaign.StatusQuery)
	if err != nil {
		return st, fmt.Errorf("status of campaign %s: %w", id, notFound(id, err))
	}
	if err := v.Get(&st); err != nil {
		return st, fmt.Errorf("status of campaign %s: %w", id, err)
	}
	return st, nil
}

// Result waits for the campaign to end and returns its summary.
func (c *Campaigns) Result(ctx context.Context, id string) (campaign.Summary, error) {
	var sum campaign.Summary
	if err := c.Client.GetWorkflow(ctx, id, "").Get(ctx, &sum); err != nil {
		return sum, fmt.Errorf("campaign %s: %w", id, notFound(id, err))
	}
	return sum, nil
}

// Reweight sets a node's weight in the campaign's ring.
func (c *Campaigns) Reweight(ctx context.Context, id, node string, weight float64) (campaign.NodeStatus, error) {
	return c.nodeUpdate(ctx, id, campaign.Reweight, node, campaign.ReweightRequest{Node: node, Weight: &weight})
}

// Drain stops new batches going to a node; its in-flight batches finish.
func (c *Campaigns) Drain(ctx context.Context, id, node string) (campaign.NodeStatus, error) {
	return c.nodeUpdate(ctx, id, campaign.Drain, node, campaign.NodeRequest{Node: node})
}

// Undrain puts a drained node back in the ring.
func (c *Campaigns) Undrain(ctx context.Context, id, node string) (campaign.NodeStatus, error) {
	return c.nodeUpdate(ctx, id, campaign.Undrain, node, campaign.NodeRequest{Node: node})
}

// MembershipWait bounds how long a node update waits for a campaign that
// has not yet read the node registry to take a node registered there.
const MembershipWait = 30 * time.Second

// nodeUpdate sends an update naming a node. Should the campaign reject it
// for not knowing the node, the campaign's status says so (not the
// rejection's words), and the error lists the nodes that can be named. A
// campaign just started knows none until its first membership refresh: if
// the node is live in the registry, the update waits (MembershipWait at
// most) for the campaign to take it and is sent again.
//
// The workflow's validator cannot do this itself: it may not read
// Postgres (no I/O in workflow code), and before the first refresh it has
// nothing to read from.
func (c *Campaigns) nodeUpdate(ctx context.Context, id, name, node string, req any) (campaign.NodeStatus, error) {
	ns, err := update[campaign.NodeStatus](ctx, c, id, name, req)
	var rejected *temporal.ApplicationError
	if err == nil || !errors.As(err, &rejected) {
		return ns, err
	}
	st, serr := c.Status(ctx, id)
	if serr != nil {
		return ns, err
	}
	if hasNode(st, node) {
		// Rejected for another reason (the weight, say), or the campaign
		// took the node between the update and the status: once more.
		return update[campaign.NodeStatus](ctx, c, id, name, req)
	}
	if len(st.Nodes) > 0 {
		return ns, fmt.Errorf("%s campaign %s: %w", name, id, &UnknownNodeError{Campaign: id, Node: node, Known: nodeIDs(st)})
	}
	live := c.liveNodes(ctx)
	if !slices.Contains(live, node) {
		return ns, fmt.Errorf("%s campaign %s: %w", name, id, &UnknownNodeError{Campaign: id, Node: node, Registered: live})
	}
	st, err = c.awaitMembership(ctx, id)
	if err != nil {
		return ns, err
	}
	if !hasNode(st, node) {
		return ns, fmt.Errorf("%s campaign %s: %w", name, id, &UnknownNodeError{Campaign: id, Node: node, Known: nodeIDs(st)})
	}
	return update[campaign.NodeStatus](ctx, c, id, name, req)
}

// liveNodes lists the registry's live nodes, or nil if there is no
// registry or it cannot be read.
func (c *Campaigns) liveNodes(ctx context.Context) []string {
	if c.Registry == nil {
		return nil
	}
	infos, err := c.Registry.Nodes(ctx, nil)
	if err != nil {
		return nil
	}
	live := []string{}
	for _, n := range infos {
		if n.Alive {
			live = append(live, n.ID)
		}
	}
	return live
}

// awaitMembership polls the campaign's status until it knows some node,
// for MembershipWait at most.
func (c *Campaigns) awaitMembership(ctx context.Context, id string) (campaign.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, MembershipWait)
	defer cancel()
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		st, err := c.Status(ctx, id)
		if err == nil && len(st.Nodes) > 0 {
			return st, nil
		}
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("campaign %s has not read the node registry after %v: %w", id, MembershipWait, ctx.Err())
		case <-t.C:
		}
	}
}

func hasNode(st campaign.Status, id string) bool {
	return slices.ContainsFunc(st.Nodes, func(n campaign.NodeStatus) bool { return n.ID == id })
}

func nodeIDs(st campaign.Status) []string {
	ids := make([]string, len(st.Nodes))
	for i, n := range st.Nodes {
		ids[i] = n.ID
	}
	return ids
}

// Pause stops leasing; batches in flight finish.
func (c *Campaigns) Pause(ctx context.Context, id string) (campaign.Status, error) {
	return update[campaign.Status](ctx, c, id, campaign.Pause)
}

// Resume undoes Pause.
func (c *Campaigns) Resume(ctx context.Context, id string) (campaign.Status, error) {
	return update[campaign.Status](ctx, c, id, campaign.Resume)
}

// AddURLs adds URLs to a running campaign (the add_urls update) with a
// priority (0 for none), at most campaign.MaxAddURLs at a time, and says
// of each what became of it.
func (c *Campaigns) AddURLs(ctx context.Context, id string, urls []string, priority int) (campaign.AddURLsResult, error) {
	return update[campaign.AddURLsResult](ctx, c, id, campaign.AddURLs, campaign.AddURLsRequest{URLs: urls, Priority: priority})
}

// Cancel asks the campaign to stop; batches in flight hand back what they
// have not fetched.
func (c *Campaigns) Cancel(ctx context.Context, id string) error {
	if err := c.Client.CancelWorkflow(ctx, id, ""); err != nil {
		return fmt.Errorf("cancel campaign %s: %w", id, notFound(id, err))
	}
	return nil
}

// update sends a workflow update and waits for its answer, so a rejected
// operation (an unknown node, say) comes back as an error naming the field.
func update[T any](ctx context.Context, c *Campaigns, id, name string, args ...any) (T, error) {
	var out T
	h, err := c.Client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: id, UpdateName: name, Args: args, WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err != nil {
		return out, fmt.Errorf("%s campaign %s: %w", name, id, notFound(id, err))
	}
	if err := h.Get(ctx, &out); err != nil {
		return out, fmt.Errorf("%s campaign %s: %w", name, id, plain(err))
	}
	return out, nil
}

// plain strips the SDK's "(type: ..., retryable: ...)" decoration from a
// rejection, leaving the workflow's own words ("node: unknown node ..."),
// and keeps the *temporal.ApplicationError for errors.As.
func plain(err error) error {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return rejection{appErr}
	}
	return err
}

// rejection is a workflow's answer to an update it refused, in the
// workflow's own words.
type rejection struct{ err *temporal.ApplicationError }

func (r rejection) Error() string { return r.err.Message() }
func (r rejection) Unwrap() error { return r.err }

func notFound(id string, err error) error {
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return &NotFoundError{Campaign: id}
	}
	return err
}

// Watch reports the campaign's status every interval until it ends, then
// returns its summary.
func Watch(ctx context.Context, c *Campaigns, id string, every time.Duration, report func(campaign.Status)) (campaign.Summary, error) {
	done := make(chan struct{})
	var (
		sum campaign.Summary
		err error
	)
	go func() {
		defer close(done)
		sum, err = c.Result(ctx, id)
	}()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-done:
			return sum, err
		case <-ctx.Done():
			return sum, ctx.Err()
		case <-t.C:
			if st, serr := c.Status(ctx, id); serr == nil {
				report(st)
			}
		}
	}
}

// FailedURLs re-queues a campaign's failed URLs; *store.Store is one.
type FailedURLs interface {
	CampaignKey(ctx context.Context, id string) (int64, error)
	RetryFailed(ctx context.Context, campaignKey int64) (int, error)
	CampaignSpec(ctx context.Context, campaignKey int64) (campaign.Spec, error)
}

// RetryFailed puts the campaign's failed URLs back to pending, attempts
// reset, and makes sure a run fetches them: the running one, or a new run
// of the campaign (same ID, its stored spec) if it had finished. It
// returns how many URLs were re-queued and whether a new run started.
func (c *Campaigns) RetryFailed(ctx context.Context, st FailedURLs, id string) (int, bool, error) {
	key, err := st.CampaignKey(ctx, id)
	if err != nil {
		return 0, false, err
	}
	n, err := st.RetryFailed(ctx, key)
	if err != nil {
		return 0, false, err
	}
	desc, err := c.Client.DescribeWorkflowExecution(ctx, id, "")
	if err == nil && desc.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		// Awake it, should it be idling until something is due.
		_, _ = c.Resume(ctx, id)
		return n, false, nil
	}
	if n == 0 {
		return 0, false, nil
	}
	spec, err := st.CampaignSpec(ctx, key)
	if err != nil {
		return n, false, err
	}
	if _, err := c.Start(ctx, id, spec); err != nil {
		return n, false, err
	}
	return n, true, nil
}
