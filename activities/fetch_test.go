package activities_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.temporal.io/sdk/testsuite"

	"github.com/spiderpool/spiderpool/activities"
	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/crawl"
	"github.com/spiderpool/spiderpool/fetch"
	"github.com/spiderpool/spiderpool/store"
	"github.com/spiderpool/spiderpool/tests/harness"
)

func TestMain(m *testing.M) { harness.Main(m) }

var quiet = slog.New(slog.DiscardHandler)

type row struct {
	state, lastError string
	status           *int
	attempts, depth  int
	redirects        int
}

func frontier(t *testing.T, s *store.Store) map[string]row {
	t.Helper()
	rows, err := s.Pool().Query(context.Background(), `SELECT url, state::text, coalesce(last_error, ''), last_status, attempts, depth, redirects FROM frontier`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]row{}
	for rows.Next() {
		var u string
		var r row
		if err := rows.Scan(&u, &r.state, &r.lastError, &r.status, &r.attempts, &r.depth, &r.redirects); err != nil {
			t.Fatal(err)
		}
		out[u] = r
	}
	return out
}

// TestFetchBatchOutcomes runs one batch against a small server covering
// each outcome: a page with links in and out of scope, a redirect chain
// past its cap, a 404, and a 503 that earns a retry.
func TestFetchBatchOutcomes(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/":
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, `<title>Home</title><a href="/a">a</a><a href="/a#again">dup</a><a href="http://out.of.scope/">x</a><a href="mailto:x@y">m</a>`)
		case "/r1":
			http.Redirect(w, r, "/r2", http.StatusFound)
		case "/gone":
			http.NotFound(w, r)
		case "/busy":
			http.Error(w, "busy", http.StatusServiceUnavailable)
		default:
			fmt.Fprint(w, "ok")
		}
	}))
	defer srv.Close()

	s := harness.OpenStore(t)
	ctx := context.Background()
	spec, err := campaign.Spec{
		Seeds:  []string{srv.URL + "/"},
		Limits: campaign.Limits{MaxRedirects: 1},
		Retry:  campaign.Retry{MaxAttempts: 2, InitialInterval: campaign.Duration(time.Minute)},
	}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	control := &activities.Control{Store: s, Log: quiet}
	start, err := control.StartCampaign(ctx, campaign.StartRequest{CampaignID: "c1", Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	var extra []store.NewURL
	for _, p := range []string{"/r1", "/gone", "/busy"} {
		extra = append(extra, store.NewURL{Fingerprint: crawl.Fingerprint(srv.URL + p), URL: srv.URL + p, ShardKey: srv.Listener.Addr().String()})
	}
	// The chain /r1 -> /r2 arrives here with one redirect already behind it,
	// so its next hop is over the cap of 1.
	extra[0].Redirects = 1
	if _, err := s.InsertURLs(ctx, start.CampaignKey, extra); err != nil {
		t.Fatal(err)
	}
	lease, err := control.LeaseBatch(ctx, campaign.LeaseRequest{CampaignKey: start.CampaignKey, Limit: 10, PerHost: 10, TTL: campaign.Duration(time.Minute)})
	if err != nil || lease.Size() != 4 {
		t.Fatalf("lease %+v %v", lease, err)
	}

	var env testsuite.WorkflowTestSuite
	aenv := env.NewTestActivityEnvironment()
	f := activities.NewFetch("n1", s, fetch.New(4, fetch.Guard{AllowPrivate: true}), activities.FetchOptions{Concurrency: 8}, quiet)
	f.Register(aenv)
	val, err := aenv.ExecuteActivity(campaign.FetchBatchActivity, campaign.FetchBatchRequest{
		CampaignID: "c1", CampaignKey: start.CampaignKey, LeaseID: lease.LeaseID, Node: "n1", IDs: lease.Groups[0].IDs,
	})
	if err != nil {
		t.Fatal(err)
	}
	var res campaign.BatchResult
	if err := val.Get(&res); err != nil {
		t.Fatal(err)
	}
	if res.Fetched != 2 || res.Failed != 1 || res.Retried != 1 || res.Discovered != 2 {
		t.Fatalf("result %+v: want fetched / and /r1, failed /gone, retried /busy, discovered /a and /r2", res)
	}
	fr := frontier(t, s)
	expect := func(path, state string, check func(row) bool) {
		t.Helper()
		r, ok := fr[srv.URL+path]
		if !ok || r.state != state || (check != nil && !check(r)) {
			t.Errorf("%s: %+v (present %v), want %s", path, r, ok, state)
		}
	}
	expect("/", store.Fetched, nil)
	expect("/a", store.Pending, func(r row) bool { return r.depth == 1 })
	expect("/r1", store.Fetched, nil)
	expect("/r2", store.Excluded, func(r row) bool { return r.redirects == 2 && r.lastError != "" })
	expect("/gone", store.Failed, func(r row) bool { return r.status != nil && *r.status == 404 && r.lastError == "HTTP 404 Not Found" })
	expect("/busy", store.Pending, func(r row) bool { return r.attempts == 1 && r.lastError == "HTTP 503 Service Unavailable" })
	if len(fr) != 6 {
		t.Errorf("frontier has %d rows, want 6 (out-of-scope and non-http links are not added): %v", len(fr), fr)
	}
	var title, redirect string
	if err := s.Pool().QueryRow(ctx, `SELECT (SELECT title FROM pages p JOIN frontier f ON f.id = p.url_id WHERE f.url = $1),
		(SELECT redirect_to FROM pages p JOIN frontier f ON f.id = p.url_id WHERE f.url = $2)`, srv.URL+"/", srv.URL+"/r1").Scan(&title, &redirect); err != nil {
		t.Fatal(err)
	}
	if title != "Home" || redirect != srv.URL+"/r2" {
		t.Errorf("page records: title %q redirect %q", title, redirect)
	}

	// Run the same batch again (a retry): everything is settled, nothing
	// is fetched twice.
	val, err = aenv.ExecuteActivity(campaign.FetchBatchActivity, campaign.FetchBatchRequest{
		CampaignID: "c1", CampaignKey: start.CampaignKey, LeaseID: lease.LeaseID, Node: "n1", IDs: lease.Groups[0].IDs, Attempt: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	var again campaign.BatchResult
	if err := val.Get(&again); err != nil || again.Done() != 0 || again.Skipped != 4 {
		t.Fatalf("second run %+v (%v), want all 4 skipped", again, err)
	}
}
