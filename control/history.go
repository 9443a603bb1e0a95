package control

import (
	"context"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/spiderpool/spiderpool/retry"
)

// HistoryCost is what a campaign cost its Temporal histories: events,
// activities (scheduled on a task queue) and local activities (markers),
// over every run of the workflow ID and every child workflow they started.
type HistoryCost struct {
	Runs, Events, Activities, LocalActivities int
	// TaskTimeouts and TaskFailures count the campaign's workflow tasks
	// that timed out (a worker that took one and did not answer, a sticky
	// worker that did not take it) or failed; Stall is the longest time
	// between two events of a campaign run, and StallAt when it began,
	// from the first run's start: what stops a campaign's leases shows there.
	TaskTimeouts, TaskFailures int
	Stall, StallAt             time.Duration
	// TaskTrouble says, for each timed out or failed workflow task, its
	// timeout type or failure cause.
	TaskTrouble []string
}

// CampaignHistoryCost reads the histories of every run of the campaign
// workflowID, and of their children, once visibility lists them all closed
// (at least runs of them; it is eventually consistent). It looks again
// until ctx ends.
func CampaignHistoryCost(ctx context.Context, c client.Client, workflowID string, runs int) (HistoryCost, error) {
	closed, err := ClosedRuns(ctx, c, workflowID, max(runs, 1))
	if err != nil {
		return HistoryCost{}, err
	}
	ids := make([]string, len(closed))
	for i, e := range closed {
		ids[i] = e.GetExecution().GetRunId()
	}
	cost := HistoryCost{Runs: len(ids)}
	var start time.Time
	var walk func(id, run string) error
	walk = func(id, run string) error {
		it := c.GetWorkflowHistory(ctx, id, run, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		var last time.Time
		for it.HasNext() {
			e, err := it.Next()
			if err != nil {
				return fmt.Errorf("history of %s/%s: %w", id, run, err)
			}
			cost.Events++
			if at := e.GetEventTime().AsTime(); id == workflowID {
				if start.IsZero() {
					start = at
				}
				if !last.IsZero() && at.Sub(last) > cost.Stall {
					cost.Stall, cost.StallAt = at.Sub(last), last.Sub(start)
				}
				last = at
			}
			switch e.GetEventType() {
			case enumspb.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
				cost.TaskTimeouts++
				cost.TaskTrouble = append(cost.TaskTrouble, e.GetWorkflowTaskTimedOutEventAttributes().GetTimeoutType().String())
			case enumspb.EVENT_TYPE_WORKFLOW_TASK_FAILED:
				cost.TaskFailures++
				cost.TaskTrouble = append(cost.TaskTrouble, e.GetWorkflowTaskFailedEventAttributes().GetCause().String())
			}
			switch {
			case e.GetActivityTaskScheduledEventAttributes() != nil:
				cost.Activities++
			case e.GetMarkerRecordedEventAttributes().GetMarkerName() == "LocalActivity":
				cost.LocalActivities++
			}
			if a := e.GetChildWorkflowExecutionStartedEventAttributes(); a != nil {
				if err := walk(a.GetWorkflowExecution().GetWorkflowId(), a.GetWorkflowExecution().GetRunId()); err != nil {
					return err
				}
			}
		}
		return nil
	}
	for _, run := range ids {
		if err := walk(workflowID, run); err != nil {
			return cost, err
		}
	}
	return cost, nil
}

// ClosedRuns lists the runs of workflowID once visibility shows none open
// and at least least of them (it is eventually consistent: a run that
// just closed may take a moment to show). It looks again until ctx ends.
func ClosedRuns(ctx context.Context, c client.Client, workflowID string, least int) ([]*workflowpb.WorkflowExecutionInfo, error) {
	for wait := retry.Backoff(50*time.Millisecond, time.Second); ; {
		var runs []*workflowpb.WorkflowExecutionInfo
		open := 0
		var token []byte
		for {
			resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
				Query: fmt.Sprintf("WorkflowId = %q", workflowID), NextPageToken: token,
			})
			if err != nil {
				return nil, fmt.Errorf("list the runs of %s: %w", workflowID, err)
			}
			for _, e := range resp.GetExecutions() {
				runs = append(runs, e)
				if e.GetCloseTime() == nil {
					open++
				}
			}
			if token = resp.GetNextPageToken(); len(token) == 0 {
				break
			}
		}
		if open == 0 && len(runs) >= least {
			return runs, nil
		}
		if !retry.Sleep(ctx.Done(), wait) {
			return runs, fmt.Errorf("visibility lists %d runs of %s, %d of them open: %w", len(runs), workflowID, open, ctx.Err())
		}
	}
}
