package integration

import (
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/tests/harness"
	"github.com/spiderpool/spiderpool/tests/synthweb"
)

// TestMaxPagesWaitsForRetriesAndLeavesNothingLeased: with max_pages spent
// while some of its URLs wait in retry backoff (their pages answer 503
// twice), the campaign waits for them rather than ending early, fetches
// exactly max_pages URLs, and ends with no URL leased or pending: the rest
// are excluded at the limit. A third of the pages answer 503 twice, so many
// admitted URLs wait in backoff when the budget is spent (with fewer, the
// faults did not show); the host back-off that so many 503s cause makes it
// take about two minutes.
func TestMaxPagesWaitsForRetriesAndLeavesNothingLeased(t *testing.T) {
	const maxPages = 60
	web := harness.StartWeb(t, synthweb.Config{Hosts: 3, Pages: 300, LinksPerPage: 3, Seed: 61,
		TransientFraction: 0.3, TransientAttempts: 2})
	s := harness.NewStack(t)
	s.StartNode("a", 1)
	s.StartNode("b", 1)

	spec := loopbackSpec(web)
	spec.Seeds = web.Roots()
	spec.Limits.MaxPages = maxPages
	spec.Retry = campaign.Retry{MaxAttempts: 4, InitialInterval: campaign.Duration(500 * time.Millisecond), BackoffCoefficient: 2}
	sum := harness.RunCampaign(t, s, "limits-"+s.Name, spec, 8*time.Minute)

	if sum.Fetched+sum.Failed != maxPages || sum.Failed != 0 {
		states := s.Strings(`SELECT state::text || ' ' || coalesce(last_error, '') || ' ' || (first_leased_at IS NOT NULL)::text || ' ' || count(*)
			FROM frontier f JOIN campaigns c ON c.key = f.campaign WHERE c.id = $1 GROUP BY state, last_error, first_leased_at IS NOT NULL`, "limits-"+s.Name)
		t.Errorf("fetched %d, failed %d: want %d fetched, none failed (each page answers after two 503s, and four attempts are allowed); frontier (state, error, ever leased, count): %q",
			sum.Fetched, sum.Failed, maxPages, states)
	}
	if sum.Leased != 0 || sum.Pending != 0 {
		t.Errorf("ended with %d leased and %d pending URLs, want none", sum.Leased, sum.Pending)
	}
	left := s.Strings(`SELECT state::text || ' ' || count(*) FROM frontier f JOIN campaigns c ON c.key = f.campaign
		WHERE c.id = $1 AND f.state IN ('leased', 'pending') GROUP BY state`, "limits-"+s.Name)
	if len(left) != 0 {
		t.Errorf("frontier after the campaign: %v, want no leased or pending rows", left)
	}
}
