package workflows

import (
	"errors"
	"fmt"

	"go.temporal.io/sdk/workflow"

	"github.com/spiderpool/spiderpool/campaign"
)

// registerAddURLs sets up the add_urls update: an operator adds URLs to
// the running campaign, and hears of each whether it was new, known,
// out of scope or not a URL. Nothing changes for a run that never gets
// one, so no version marker is needed.
func (d *dispatcher) registerAddURLs() error {
	validate := func(ctx workflow.Context, r campaign.AddURLsRequest) error {
		switch {
		case len(r.URLs) == 0:
			return errors.New("urls: give at least one URL")
		case len(r.URLs) > campaign.MaxAddURLs:
			return fmt.Errorf("urls: %d URLs in one update, at most %d: send them in parts", len(r.URLs), campaign.MaxAddURLs)
		case r.Priority < 0 || r.Priority > campaign.MaxPriority:
			return fmt.Errorf("priority: %d is not in 0..%d", r.Priority, campaign.MaxPriority)
		case d.cancelled || d.state == "finishing" || d.state == "cancelling":
			return fmt.Errorf("campaign %s is %s: start a new one with these URLs as seeds", d.id, d.state)
		}
		return nil
	}
	add := func(ctx workflow.Context, r campaign.AddURLsRequest) (campaign.AddURLsResult, error) {
		// Counted as a write outstanding: the campaign does not finish,
		// or continue as new, with URLs half added.
		d.ops++
		defer func() {
			d.ops--
			d.leaseDry = false // new URLs may be due
			d.wake.SendAsync(nil)
		}()
		// An update may come before the campaign's first activity has
		// stored it.
		if err := workflow.Await(ctx, func() bool { return d.key != 0 }); err != nil {
			return campaign.AddURLsResult{}, err
		}
		var res campaign.AddURLsResult
		err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, d.controlOptions()), campaign.AddURLsActivity,
			campaign.AddURLsActivityRequest{CampaignKey: d.key, CampaignID: d.id, URLs: r.URLs, Priority: r.Priority,
				RequestID: workflow.GetInfo(ctx).WorkflowExecution.RunID + "/" + workflow.GetCurrentUpdateInfo(ctx).ID}).Get(ctx, &res)
		if err != nil {
			return res, fmt.Errorf("add %d URLs: %w", len(r.URLs), err)
		}
		d.counters.Added += int64(res.New)
		return res, nil
	}
	return workflow.SetUpdateHandlerWithOptions(d.ctx, campaign.AddURLs, add, workflow.UpdateHandlerOptions{Validator: validate})
}
