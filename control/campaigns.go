package control

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/store"
)

// Campaigns starts and steers campaign workflows.
type Campaigns struct {
	Client client.Client
	// Queue is the control task queue the nodes poll.
	Queue string
}

// NewCampaignID returns a readable, unique campaign ID such as
// crawl-20261202-143005-9f3a.
func NewCampaignID(now time.Time) string {
	b := make([]byte, 2)
	_, _ = rand.Read(b)
	return "crawl-" + now.UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b)
}

// Start validates spec and starts its workflow under the campaign ID. An
// invalid spec is refused here, with every problem named, before anything
// runs.
func (c *Campaigns) Start(ctx context.Context, id string, spec campaign.Spec) (client.WorkflowRun, error) {
	if _, err := spec.Normalize(); err != nil {
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
	return update[campaign.NodeStatus](ctx, c, id, campaign.Reweight, campaign.ReweightRequest{Node: node, Weight: &weight})
}

// Drain stops new batches going to a node; its in-flight batches finish.
func (c *Campaigns) Drain(ctx context.Context, id, node string) (campaign.NodeStatus, error) {
	return update[campaign.NodeStatus](ctx, c, id, campaign.Drain, campaign.NodeRequest{Node: node})
}

// Undrain puts a drained node back in the ring.
func (c *Campaigns) Undrain(ctx context.Context, id, node string) (campaign.NodeStatus, error) {
	return update[campaign.NodeStatus](ctx, c, id, campaign.Undrain, campaign.NodeRequest{Node: node})
}

// Pause stops leasing; batches in flight finish.
func (c *Campaigns) Pause(ctx context.Context, id string) (campaign.Status, error) {
	return update[campaign.Status](ctx, c, id, campaign.Pause)
}

// Resume undoes Pause.
func (c *Campaigns) Resume(ctx context.Context, id string) (campaign.Status, error) {
	return update[campaign.Status](ctx, c, id, campaign.Resume)
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
// rejection, leaving the workflow's own words ("node: unknown node ...").
func plain(err error) error {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return errors.New(appErr.Message())
	}
	return err
}

func notFound(id string, err error) error {
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return fmt.Errorf("no running campaign with ID %q", id)
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

// RetryFailed puts the campaign's failed URLs back to pending, attempts
// reset, and makes sure a run fetches them: the running one, or a new run
// of the campaign (same ID, its stored spec) if it had finished. It
// returns how many URLs were re-queued and whether a new run started.
func (c *Campaigns) RetryFailed(ctx context.Context, st *store.Store, id string) (int, bool, error) {
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
