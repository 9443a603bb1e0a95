package activities_test

import (
	"context"
	"log/slog"
	"testing"

	"go.temporal.io/sdk/testsuite"

	"github.com/spiderpool/spiderpool/activities"
	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/tests/harness"
)

// TestAddURLsRetriedAfterItsInsertCountsItsURLsNew: an add_urls activity
// run again after its insert committed (its answer lost, a worker gone)
// reports the URLs it stored as new, as the first attempt did, so the
// campaign's Added count and the operator's answer are right; another
// request with the same URLs finds them known.
func TestAddURLsRetriedAfterItsInsertCountsItsURLsNew(t *testing.T) {
	s := harness.OpenStore(t)
	spec, err := campaign.Spec{Seeds: []string{"http://a.test/"}, Scope: campaign.Scope{AllowedDomains: []string{"a.test"}}}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	key, _, err := s.CreateCampaign(context.Background(), "add-retry", spec)
	if err != nil {
		t.Fatal(err)
	}
	c := &activities.Control{Store: s, Log: slog.New(slog.DiscardHandler)}
	var ts testsuite.WorkflowTestSuite
	env := ts.NewTestActivityEnvironment()
	env.RegisterActivity(c.AddURLs)
	add := func(request string) campaign.AddURLsResult {
		t.Helper()
		v, err := env.ExecuteActivity(c.AddURLs, campaign.AddURLsActivityRequest{
			CampaignKey: key, CampaignID: "add-retry", RequestID: request,
			URLs: []string{"http://a.test/1", "http://a.test/2", "http://b.test/out"},
		})
		if err != nil {
			t.Fatal(err)
		}
		var res campaign.AddURLsResult
		if err := v.Get(&res); err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := add("run-1/update-1"); res.New != 2 || res.OutOfScope != 1 {
		t.Fatalf("first attempt: %+v, want 2 new and 1 out of scope", res)
	}
	if res := add("run-1/update-1"); res.New != 2 || res.Duplicate != 0 || res.URLs[0].Result != campaign.AddedNew {
		t.Errorf("the same request again (a retry after its insert): %+v, want the 2 URLs it stored new", res)
	}
	if res := add("run-1/update-2"); res.New != 0 || res.Duplicate != 2 {
		t.Errorf("another request with the same URLs: %+v, want 2 duplicates", res)
	}
}
