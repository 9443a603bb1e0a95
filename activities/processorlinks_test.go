package activities_test

import (
	"context"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/activities"
	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/store"
	"github.com/spiderpool/spiderpool/tests/harness"
)

// TestProcessorLinksAreAdmittedAsPageLinks: the links a processor returns
// are held to every rule a page's own links are, the cap on a host's
// URLs with a query included: past limits.max_query_urls_per_host they
// are recorded excluded, with the reason, not queued.
func TestProcessorLinksAreAdmittedAsPageLinks(t *testing.T) {
	ctx := context.Background()
	s := harness.OpenStore(t)
	const id = "processor-links"
	spec := campaign.Spec{
		Seeds:      []string{"http://a.test/"},
		Processors: []campaign.Processor{{Name: "p", TaskQueue: "p-queue", Activity: "P"}},
	}
	spec.Limits.MaxQueryURLsPerHost = 2
	c := &activities.Control{Store: s, Log: slog.New(slog.DiscardHandler)}
	started, err := c.StartCampaign(ctx, campaign.StartRequest{CampaignID: id, Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	key := started.CampaignKey
	page := fetchForProcessor(t, s, key, "p")

	lease := int64(1)<<32 | 1
	dl, err := c.LeaseDeliveries(ctx, campaign.DeliveryLeaseRequest{CampaignKey: key, CampaignID: id, Processor: "p", Lease: lease})
	if err != nil || len(dl.IDs) != 1 || dl.IDs[0] != page {
		t.Fatalf("leased %v (%v), want page %d", dl.IDs, err, page)
	}
	links := []string{"/search?q=1", "/search?q=2", "/search?q=3", "/search?q=4", "/plain"}
	_, err = c.StoreProcessed(ctx, campaign.StoreProcessedRequest{
		CampaignKey: key, CampaignID: id, Processor: "p", IDs: dl.IDs, Lease: lease,
		Result: &campaign.ProcessResult{Pages: []campaign.PageResult{{Key: dl.Request.Pages[0].Key, Links: links}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var pending, capped int
	if err := s.Pool().QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE state = 'pending'),
		       count(*) FILTER (WHERE state = 'excluded' AND last_error LIKE '%limits.max_query_urls_per_host (2)%')
		FROM frontier WHERE campaign = $1 AND parent_id = $2`, key, page).Scan(&pending, &capped); err != nil {
		t.Fatal(err)
	}
	if pending != 3 || capped != 2 {
		t.Errorf("the processor's links: %d pending and %d excluded past the query cap, want 3 and 2", pending, capped)
	}
}

// fetchForProcessor leases, claims and commits the campaign's one pending
// URL as a fetched page kept for processor, as a node does, and gives its
// id.
func fetchForProcessor(t *testing.T, s *store.Store, key int64, processor string) int64 {
	t.Helper()
	ctx := context.Background()
	reg := store.Registration{ID: "n1", Weight: 1, Incarnation: "1", TTL: time.Hour}
	if err := s.RegisterNode(ctx, reg); err != nil {
		t.Fatal(err)
	}
	holder := store.HolderToken("n1", "1")
	l, err := s.LeaseHosts(ctx, store.HostLeaseParams{CampaignKey: key, Nodes: []campaign.LeaseNode{{ID: "n1", Weight: 1, Batches: 1}},
		BatchSize: 10, Horizon: time.Hour, TTL: time.Minute})
	if err != nil || l.Size() != 1 {
		t.Fatalf("leased %+v (%v), want the seed", l, err)
	}
	claimed, err := s.Claim(ctx, key, l.LeaseID, l.Batches[0].IDs(), holder, "n1", time.Minute)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claimed %v (%v), want the seed", claimed, err)
	}
	c := claimed[0]
	now := time.Now()
	out := store.Outcome{
		ID: c.ID, State: store.Fetched, Attempted: true, Status: 200,
		Page: &store.Page{Status: 200, ContentType: "text/html", FetchedAt: now},
		Body: &store.PageBody{
			Processors: []string{processor}, URL: c.URL, Depth: c.Depth, FinalURL: c.URL, Status: 200,
			Header: http.Header{"Content-Type": {"text/html"}}, ContentType: "text/html", FetchedAt: now, Body: []byte("<p>page</p>"),
		},
	}
	if res, err := s.Commit(ctx, key, holder, "n1", []store.Outcome{out}, nil); err != nil || len(res.Accepted) != 1 {
		t.Fatalf("commit accepted %v (%v), want the page", res.Accepted, err)
	}
	return c.ID
}
