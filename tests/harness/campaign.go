package harness

import (
	"context"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/campaign"
)

// RunCampaign starts a campaign on the stack and waits up to within for its
// summary; a campaign that fails to start or to end in time fails the test.
func RunCampaign(t testing.TB, s *Stack, id string, spec campaign.Spec, within time.Duration) campaign.Summary {
	t.Helper()
	run, err := s.Campaigns.Start(context.Background(), id, spec)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	var sum campaign.Summary
	if err := run.Get(ctx, &sum); err != nil {
		t.Fatalf("campaign %s: %v", id, err)
	}
	return sum
}

// CampaignResult waits up to within for the campaign's latest run to end
// (a run started again under its ID included) and returns its summary.
func CampaignResult(t testing.TB, s *Stack, id string, within time.Duration) campaign.Summary {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	var sum campaign.Summary
	if err := s.Client.GetWorkflow(ctx, id, "").Get(ctx, &sum); err != nil {
		t.Fatalf("campaign %s: %v", id, err)
	}
	return sum
}
