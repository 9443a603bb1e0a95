package activities

import (
	"context"

	"go.temporal.io/sdk/activity"

	"github.com/spiderpool/spiderpool/admission"
	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/crawl"
	"github.com/spiderpool/spiderpool/store"
)

// AddURLs checks the URLs an operator adds to a running campaign, as
// seeds are checked (depth 0) and as links are scoped, stores the ones in
// scope, and says of each whether it was new, known already, out of
// scope or not a URL. Out-of-scope URLs are not stored.
func (c *Control) AddURLs(ctx context.Context, req campaign.AddURLsActivityRequest) (campaign.AddURLsResult, error) {
	var res campaign.AddURLsResult
	spec, err := c.Store.CampaignSpec(ctx, req.CampaignKey)
	if err != nil {
		return res, err
	}
	rules, err := admission.Compile(req.CampaignKey, spec)
	if err != nil {
		return res, err
	}
	request := req.RequestID
	if request == "" { // a run from before request IDs: the activity's own identity, the same for each attempt
		info := activity.GetInfo(ctx)
		request = info.WorkflowExecution.RunID + "/" + info.ActivityID
	}
	var urls []store.NewURL
	first := map[uint64]int{} // fingerprint -> index of its first mention
	for i, raw := range req.URLs {
		out := campaign.AddedURL{URL: raw}
		u, err := crawl.Canonicalize(raw)
		switch {
		case err != nil:
			out.Result, out.Reason = campaign.AddedInvalid, err.Error()
		default:
			out.Canonical = u.String
			row, refused := rules.Admit(admission.Candidate{URL: u, From: admission.Added, AddedBy: request}, nil)
			if refused != crawl.InScope {
				out.Result, out.Reason = campaign.AddedOutOfScope, string(refused)
				break
			}
			if _, twice := first[row.Fingerprint]; twice {
				out.Result, out.Reason = campaign.AddedDuplicate, "given twice"
				break
			}
			first[row.Fingerprint] = i
			urls = append(urls, row)
		}
		res.URLs = append(res.URLs, out)
	}
	inserted, err := c.Store.InsertURLsNew(ctx, req.CampaignKey, urls)
	if err != nil {
		return res, err
	}
	fps := make([]int64, len(urls))
	for i, u := range urls {
		fps[i] = int64(u.Fingerprint)
	}
	if err := c.Store.RaisePriority(ctx, req.CampaignKey, fps, int16(req.Priority)); err != nil {
		return res, err
	}
	for _, u := range urls {
		r := &res.URLs[first[u.Fingerprint]]
		if inserted[int64(u.Fingerprint)] {
			r.Result = campaign.AddedNew
		} else {
			r.Result = campaign.AddedDuplicate
		}
	}
	res.Count()
	c.Log.Info("URLs added", "campaign", req.CampaignID, "new", res.New, "duplicate", res.Duplicate,
		"out_of_scope", res.OutOfScope, "invalid", res.Invalid)
	return res, nil
}
