package control

import (
	"context"
	"fmt"
	"strings"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"

	"github.com/spiderpool/spiderpool/campaign"
)

// CampaignInfo is one campaign as the Temporal visibility store sees it.
type CampaignInfo struct {
	ID string `json:"id"`
	// Status is the CampaignStatus search attribute where the namespace has
	// it, else Temporal's execution status.
	Status    string     `json:"status"`
	Execution string     `json:"execution"` // Temporal's: Running, Completed, ...
	Fetched   *int64     `json:"pages_fetched,omitempty"`
	Failed    *int64     `json:"pages_failed,omitempty"`
	Started   time.Time  `json:"started"`
	Closed    *time.Time `json:"closed,omitempty"`
}

// List returns the newest campaigns first, at most limit, whose
// CampaignStatus is status (any if empty). It is the CLI form of
// `temporal workflow list --query 'WorkflowType="CrawlCampaign" AND
// CampaignStatus="Running"'`, and shows only each campaign's latest run.
func (c *Campaigns) List(ctx context.Context, status string, limit int) ([]CampaignInfo, error) {
	query := fmt.Sprintf("WorkflowType = %q", campaign.WorkflowType)
	if status != "" {
		query += fmt.Sprintf(" AND %s = %q", campaign.AttrStatus, status)
	}
	var (
		out   []CampaignInfo
		token []byte
		seen  = map[string]bool{}
	)
	for len(out) < limit {
		resp, err := c.Client.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: query, PageSize: int32(min(limit, 1000)), NextPageToken: token,
		})
		if err != nil {
			if status != "" && strings.Contains(err.Error(), campaign.AttrStatus) {
				return nil, fmt.Errorf("list campaigns: the namespace has no %s search attribute (register it: temporal operator search-attribute create --name %s --type Keyword): %w",
					campaign.AttrStatus, campaign.AttrStatus, err)
			}
			return nil, fmt.Errorf("list campaigns: %w", err)
		}
		for _, e := range resp.GetExecutions() {
			id := e.GetExecution().GetWorkflowId()
			if seen[id] || len(out) == limit { // continue-as-new: runs share the ID
				continue
			}
			seen[id] = true
			info := CampaignInfo{
				ID: id, Execution: e.GetStatus().String(), // "Running", "ContinuedAsNew", ...
				Started: e.GetStartTime().AsTime(),
			}
			info.Status = info.Execution
			fields := e.GetSearchAttributes().GetIndexedFields()
			if s, ok := decode[string](fields[campaign.AttrStatus]); ok {
				info.Status = s
			}
			if n, ok := decode[int64](fields[campaign.AttrFetched]); ok {
				info.Fetched = &n
			}
			if n, ok := decode[int64](fields[campaign.AttrFailed]); ok {
				info.Failed = &n
			}
			if ct := e.GetCloseTime(); ct != nil && e.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
				t := ct.AsTime()
				info.Closed = &t
			}
			out = append(out, info)
		}
		token = resp.GetNextPageToken()
		if len(token) == 0 {
			break
		}
	}
	return out, nil
}

func decode[T any](p *commonpb.Payload) (T, bool) {
	var v T
	if p == nil {
		return v, false
	}
	if err := converter.GetDefaultDataConverter().FromPayload(p, &v); err != nil {
		return v, false
	}
	return v, true
}
