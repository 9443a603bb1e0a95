// Package activities holds the Temporal activities of a campaign: thin
// adapters, run on the control queue, between the workflow and Postgres
// (set-up, leasing, membership, ring history, delivery to processors,
// finish), and the node's bodies listener that processors read. Workflow
// code only decides; this package does. The crawling itself is package
// crawler's: nodes take their batches from Postgres, not from activities.
package activities

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/spiderpool/spiderpool/admission"
	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/crawl"
	"github.com/spiderpool/spiderpool/store"
)

// Control runs the campaign workflow's control activities.
type Control struct {
	Store *store.Store
	Log   *slog.Logger
	// SearchAttributes lists the custom search attributes the namespace
	// has registered; nil means none are (the workflow upserts none).
	SearchAttributes func(context.Context) ([]string, error)

	specs sync.Map // campaign key -> fixedSpec
	// queries caps the hosts of the links processors return; the nodes
	// keep their own counts for the links they find.
	queries admission.QueryCounts
}

// Register names each activity as in package campaign.
func (c *Control) Register(r interface {
	RegisterActivityWithOptions(any, activity.RegisterOptions)
}) {
	r.RegisterActivityWithOptions(c.StartCampaign, activity.RegisterOptions{Name: campaign.StartCampaignActivity})
	r.RegisterActivityWithOptions(c.LeaseHosts, activity.RegisterOptions{Name: campaign.LeaseHostsActivity})
	r.RegisterActivityWithOptions(c.AddURLs, activity.RegisterOptions{Name: campaign.AddURLsActivity})
	r.RegisterActivityWithOptions(c.ReleaseBatch, activity.RegisterOptions{Name: campaign.ReleaseBatchActivity})
	r.RegisterActivityWithOptions(c.RefreshMembership, activity.RegisterOptions{Name: campaign.RefreshMembershipActivity})
	r.RegisterActivityWithOptions(c.RecordRingChanges, activity.RegisterOptions{Name: campaign.RecordRingChangesActivity})
	r.RegisterActivityWithOptions(c.FinishCampaign, activity.RegisterOptions{Name: campaign.FinishCampaignActivity})
	r.RegisterActivityWithOptions(c.LeaseDeliveries, activity.RegisterOptions{Name: campaign.LeaseDeliveriesActivity})
	r.RegisterActivityWithOptions(c.StoreProcessed, activity.RegisterOptions{Name: campaign.StoreProcessedActivity})
	r.RegisterActivityWithOptions(c.CampaignProgress, activity.RegisterOptions{Name: campaign.CampaignProgressActivity})
	r.RegisterActivityWithOptions(c.ReleaseNodeBatches, activity.RegisterOptions{Name: campaign.ReleaseNodeBatchesActivity})
}

// StartCampaign creates the campaign row (or finds it, for a campaign
// started again under the same ID) and inserts its seeds.
func (c *Control) StartCampaign(ctx context.Context, req campaign.StartRequest) (campaign.StartResult, error) {
	spec, err := req.Spec.Normalize()
	if err != nil {
		return campaign.StartResult{}, temporal.NewNonRetryableApplicationError(err.Error(), "InvalidSpec", err)
	}
	key, existed, err := c.Store.CreateCampaign(ctx, req.CampaignID, spec)
	if err != nil {
		return campaign.StartResult{}, err
	}
	rules, err := admission.Compile(key, spec)
	if err != nil {
		return campaign.StartResult{}, temporal.NewNonRetryableApplicationError(err.Error(), "InvalidSpec", err)
	}
	seeds := make([]store.NewURL, 0, len(spec.Seeds))
	for _, raw := range spec.Seeds {
		u, err := crawl.Canonicalize(raw)
		if err != nil {
			return campaign.StartResult{}, temporal.NewNonRetryableApplicationError(err.Error(), "InvalidSpec", err)
		}
		seed, _ := rules.Admit(admission.Candidate{URL: u, From: admission.Seed}, nil) // a seed is never refused
		seeds = append(seeds, seed)
	}
	n, err := c.Store.InsertURLs(ctx, key, seeds)
	if err != nil {
		return campaign.StartResult{}, err
	}
	c.Log.Info("campaign started", "campaign", req.CampaignID, "seeds", len(seeds), "new_seeds", n, "resumed", existed)
	return campaign.StartResult{
		CampaignKey: key, SeedsInserted: n, Resumed: existed,
		SearchAttributes: c.usableAttributes(ctx, req.CampaignID),
	}, nil
}

// usableAttributes are spiderpool's search attributes the namespace knows.
// Not knowing is no reason to fail a campaign: it runs without them, and
// the log says how to register them.
func (c *Control) usableAttributes(ctx context.Context, campaignID string) []string {
	if c.SearchAttributes == nil {
		return nil
	}
	registered, err := c.SearchAttributes(ctx)
	if err != nil {
		c.Log.Warn("cannot list search attributes; the campaign will not upsert them", "campaign", campaignID, "error", err)
		return nil
	}
	var usable, missing []string
	for _, name := range slices.Sorted(maps.Keys(campaign.SearchAttributeTypes)) {
		if slices.Contains(registered, name) {
			usable = append(usable, name)
		} else {
			missing = append(missing, name+"="+campaign.SearchAttributeTypes[name])
		}
	}
	if len(missing) > 0 {
		c.Log.Warn("search attributes not registered; the Web UI cannot filter campaigns by them",
			"campaign", campaignID, "missing", missing,
			"register", "temporal operator search-attribute create --name NAME --type TYPE")
	}
	return usable
}

// LeaseHosts leases what each host needs to stay busy and routes it to
// the nodes with room.
func (c *Control) LeaseHosts(ctx context.Context, req campaign.LeaseHostsRequest) (campaign.HostLease, error) {
	fixed, err := c.fixedSpec(ctx, req.CampaignKey)
	if err != nil {
		return campaign.HostLease{}, err
	}
	lease, err := c.Store.LeaseHosts(ctx, store.HostLeaseParams{
		CampaignKey: req.CampaignKey, Nodes: req.Nodes, BatchSize: req.BatchSize, Horizon: req.Horizon.D(),
		TTL: req.TTL.D(), MaxPages: req.MaxPages, MinDelay: req.MinDelay.D(), Concurrency: req.Concurrency,
		Assign: req.Assign, Render: fixed.renders,
	})
	if err != nil {
		return lease, err
	}
	lease.ProcessorsWaiting, err = c.processorsWaiting(ctx, req.CampaignKey)
	return lease, err
}

// fixedSpec is what leasing and delivery read of a campaign's spec. It
// never changes, so it is read once per campaign.
type fixedSpec struct {
	processors []campaign.Processor
	// renders tells render hosts (spec.render); nil when it has none.
	renders func(key string) bool
}

func (c *Control) fixedSpec(ctx context.Context, key int64) (fixedSpec, error) {
	if f, ok := c.specs.Load(key); ok {
		return f.(fixedSpec), nil
	}
	spec, err := c.Store.CampaignSpec(ctx, key)
	if err != nil {
		return fixedSpec{}, err
	}
	f := fixedSpec{processors: spec.Processors}
	if spec.Render != nil {
		f.renders = spec.Render.RendersHost
	}
	got, _ := c.specs.LoadOrStore(key, f)
	return got.(fixedSpec), nil
}

// campaignProcessors is the campaign's processors.
func (c *Control) campaignProcessors(ctx context.Context, key int64) ([]campaign.Processor, error) {
	f, err := c.fixedSpec(ctx, key)
	return f.processors, err
}

// processorsWaiting counts the pages waiting for each of the campaign's
// processors; nil for a campaign without any.
func (c *Control) processorsWaiting(ctx context.Context, key int64) (map[string]int, error) {
	procs, err := c.campaignProcessors(ctx, key)
	if err != nil {
		return nil, err
	}
	var out map[string]int
	for _, p := range procs {
		n, err := c.Store.DeliveriesWaiting(ctx, key, p.Name, p.MaxPending+1)
		if err != nil {
			return nil, err
		}
		if out == nil {
			out = map[string]int{}
		}
		out[p.Name] = n
	}
	return out, nil
}

// ReleaseBatch returns to pending every URL of the given leases that no
// node claimed.
func (c *Control) ReleaseBatch(ctx context.Context, req campaign.ReleaseRequest) (int, error) {
	return c.Store.ReleaseUnclaimed(ctx, req.CampaignKey, req.Leases)
}

// RefreshMembership reads the node registry: the nodes that differ from
// what the run knows.
func (c *Control) RefreshMembership(ctx context.Context, req campaign.MembershipRequest) ([]campaign.NodeInfo, error) {
	nodes, err := c.Store.Nodes(ctx, req.Only)
	if err != nil {
		return nil, err
	}
	return campaign.MembershipChanges(nodes, req.Known), nil
}

// CampaignProgress reads a pool run's figures.
func (c *Control) CampaignProgress(ctx context.Context, req campaign.ProgressRequest) (campaign.Progress, error) {
	return c.Store.CampaignProgress(ctx, req)
}

// ReleaseNodeBatches hands back what nodes that left a pool run's ring
// were routed and have not fetched.
func (c *Control) ReleaseNodeBatches(ctx context.Context, req campaign.ReleaseNodeBatchesRequest) (int, error) {
	return c.Store.ReleaseNodeBatches(ctx, req.CampaignKey, req.Nodes, req.Lease)
}

// RecordRingChanges appends ring changes to node_weight_history.
func (c *Control) RecordRingChanges(ctx context.Context, req campaign.RecordRingChangesRequest) error {
	return c.Store.RecordRingChanges(ctx, req.CampaignKey, req.Run, req.Changes)
}

// FinishCampaign records the outcome and returns the summary from Postgres.
// A campaign that ended other than completed keeps no page body (see
// store.FinishCampaign).
func (c *Control) FinishCampaign(ctx context.Context, req campaign.FinishRequest) (campaign.Summary, error) {
	if req.ExcludeRest != "" {
		n, err := c.Store.ExcludePending(ctx, req.CampaignKey, req.ExcludeRest)
		if err != nil {
			return campaign.Summary{}, err
		}
		if n > 0 {
			c.Log.Info("excluded URLs left pending", "campaign_key", req.CampaignKey, "urls", n, "reason", req.ExcludeRest)
		}
	}
	sum, err := c.Store.FinishCampaign(ctx, req.CampaignKey, req.Outcome, req.Runs)
	if err != nil {
		return sum, fmt.Errorf("finish campaign: %w", err)
	}
	// A pool run's batches still queued go back (a cancelled campaign
	// started again under its ID fetches them at once); its nodes stop
	// what they hold within a second of seeing it ended.
	if _, err := c.Store.ReleaseNodeBatches(ctx, req.CampaignKey, nil, 0); err != nil {
		c.Log.Warn("could not hand back the campaign's queued batches; their leases expire instead", "campaign", sum.CampaignID, "error", err)
	}
	if req.Outcome == campaign.OutcomeCompleted {
		// Only disk is at stake: a failure is logged, not retried.
		switch n, err := c.Store.DropUnheldChunks(ctx, req.CampaignKey); {
		case err != nil:
			c.Log.Warn("could not drop the chunks no processor waits for", "campaign", sum.CampaignID, "error", err)
		case n > 0:
			c.Log.Warn("chunks no processor waited for were left; dropped", "campaign", sum.CampaignID, "chunks", n)
		}
	}
	if sum.Unprocessed > 0 {
		c.Log.Info("pages some processor had not taken go back to pending, their bodies dropped; the campaign started again fetches them",
			"campaign", sum.CampaignID, "outcome", sum.Outcome, "pages", sum.Unprocessed)
	}
	c.Log.Info("campaign finished", "campaign", sum.CampaignID, "outcome", sum.Outcome, "fetched", sum.Fetched,
		"failed", sum.Failed, "excluded", sum.Excluded, "pages_per_second", fmt.Sprintf("%.1f", sum.PagesPerSecond))
	return sum, nil
}
