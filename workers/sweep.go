package workers

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/spiderpool/spiderpool/store"
)

// endedOutcomes are the outcomes Postgres records for a campaign whose
// workflow closed without finishing it (FinishCampaign), by how it closed:
// terminated from the Web UI or CLI, failed, timed out, or cancelled
// before it could say so.
var endedOutcomes = map[enumspb.WorkflowExecutionStatus]string{
	enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED: "terminated",
	enumspb.WORKFLOW_EXECUTION_STATUS_FAILED:     "failed",
	enumspb.WORKFLOW_EXECUTION_STATUS_TIMED_OUT:  "timed_out",
	enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED:   "cancelled",
}

// sweepEnded finishes in Postgres, every interval, the campaigns it holds
// as running whose workflow has closed without finishing them (terminated,
// failed, timed out): they keep no bodies for processors, their unprocessed
// pages go back to pending for a run started again under their ID, and the
// nodes stop their work (store.FinishCampaign). One node of the cluster
// sweeps, the live one whose ID sorts first, so a thousand nodes cost
// Temporal one look a campaign an interval.
func sweepEnded(ctx context.Context, st *store.Store, tc client.Client, ids []string, every time.Duration, log *slog.Logger) {
	if every <= 0 {
		every = time.Minute
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		first, err := st.FirstLiveNode(ctx)
		if err != nil || !slices.Contains(ids, first) {
			continue
		}
		running, err := st.RunningCampaigns(ctx)
		if err != nil {
			log.Warn("sweep ended campaigns", "error", err)
			continue
		}
		for _, c := range running {
			desc, err := tc.DescribeWorkflowExecution(ctx, c.ID, "")
			var notFound *serviceerror.NotFound
			switch {
			case errors.As(err, &notFound):
				continue // not this namespace's, or gone with its retention: nothing says how it ended
			case err != nil:
				log.Warn("sweep ended campaigns: describe", "campaign", c.ID, "error", err)
				continue
			}
			outcome, ended := endedOutcomes[desc.GetWorkflowExecutionInfo().GetStatus()]
			if !ended {
				continue
			}
			sum, err := st.FinishCampaign(ctx, c.Key, outcome, 0)
			if err != nil {
				log.Warn("finish a campaign whose workflow ended", "campaign", c.ID, "outcome", outcome, "error", err)
				continue
			}
			log.Info("finished a campaign whose workflow ended without finishing it", "campaign", c.ID, "outcome", outcome,
				"unprocessed_pages_requeued", sum.Unprocessed)
		}
	}
}
