package store_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/store"
	"github.com/spiderpool/spiderpool/tests/harness"
)

// processedCampaign starts a campaign of a.test whose processors are p
// and q, leases its 10 URLs and claims them all for holder n1; it says
// the URLs in lease order.
func processedCampaign(t *testing.T, s *store.Store, edit func(*campaign.Spec)) (key int64, n1 string, all []int64, claimed []store.ClaimedURL) {
	t.Helper()
	spec := campaign.Spec{Seeds: []string{"http://a.test/"}, Processors: []campaign.Processor{
		{Name: "p", TaskQueue: "p", Activity: "p"}, {Name: "q", TaskQueue: "q", Activity: "q"}}}
	if edit != nil {
		edit(&spec)
	}
	spec, err := spec.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	if key, _, err = s.CreateCampaign(ctx, t.Name(), spec); err != nil {
		t.Fatal(err)
	}
	n1 = holder(t, s, "n1", "1")
	var raw []string
	for i := range 10 {
		raw = append(raw, fmt.Sprintf("http://a.test/%d", i))
	}
	if _, err := s.InsertURLs(ctx, key, urls(t, raw...)); err != nil {
		t.Fatal(err)
	}
	l := leaseAll(t, s, key, 10)
	all = ids(l)
	if claimed, err = s.Claim(ctx, key, l.LeaseID, all, n1, "n1", time.Minute); err != nil || len(claimed) != len(all) {
		t.Fatalf("claimed %d of %d (%v)", len(claimed), len(all), err)
	}
	return key, n1, all, claimed
}

// fetchedFor is the outcome of a claimed URL fetched for processors p and
// q.
func fetchedFor(c store.ClaimedURL) store.Outcome {
	return store.Outcome{ID: c.ID, State: store.Fetched, Attempted: true, Status: 200,
		Page: &store.Page{Status: 200, ContentType: "text/html", FetchedAt: time.Now()},
		Body: &store.PageBody{Processors: []string{"p", "q"}, URL: c.URL, Depth: c.Depth, FinalURL: c.URL,
			Status: 200, Header: http.Header{"Etag": {"x"}}, ContentType: "text/html", FetchedAt: time.Now(),
			Body: []byte(fmt.Sprint("private body ", c.ID))}}
}

// bodyRowsOf counts what a campaign still keeps for processors: bodies
// in chunks and per page, and pages waiting or out in batches.
func bodyRowsOf(t *testing.T, s *store.Store, key int64) string {
	t.Helper()
	var chunks, bodies, waiting, batches int
	if err := s.Pool().QueryRow(ctx, `
		SELECT (SELECT count(*) FROM body_chunks WHERE campaign = $1),
		       (SELECT count(*) FROM page_bodies WHERE campaign = $1),
		       (SELECT count(*) FROM deliveries WHERE campaign = $1 AND state IN ('pending', 'leased'))
		         + (SELECT count(*) FROM chunk_deliveries WHERE campaign = $1),
		       (SELECT count(*) FROM delivery_batches WHERE campaign = $1)`, key).
		Scan(&chunks, &bodies, &waiting, &batches); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%d chunks, %d page_bodies, %d deliveries waiting, %d batches out", chunks, bodies, waiting, batches)
}

// TestCancelledCampaignDropsItsBodies: a campaign that ends other than
// completed keeps no page body, of any generation, nor anything waiting
// for a processor. Its pages that some processor had still to take go
// back to pending with the reason, so a run under the same ID fetches and
// delivers them again; the pages every processor took stay fetched. The
// summary is the run's as it ended, the requeued pages counted apart,
// and a retried finish answers the same. A node's commit that lands
// after the finish records nothing and keeps no body.
func TestCancelledCampaignDropsItsBodies(t *testing.T) {
	s := harness.OpenStore(t)
	key, n1, all, claimed := processedCampaign(t, s, nil)
	commit := func(want int, outs ...store.Outcome) {
		t.Helper()
		res, err := s.Commit(ctx, key, n1, "n1", outs, nil)
		if err != nil || len(res.Accepted) != want {
			t.Fatalf("commit accepted %v (%v), want %d pages", res.Accepted, err, want)
		}
	}
	// Pages 0-5 in a chunk; 7-9 are still being fetched when the
	// campaign ends.
	var chunked []store.Outcome
	for _, c := range claimed[:6] {
		chunked = append(chunked, fetchedFor(c))
	}
	commit(6, chunked...)
	bodiless := fetchedFor(claimed[6])
	bodiless.Body = nil
	commit(1, bodiless)

	// Both processors take and store pages 0-2; q has 3 and 4 out in a
	// batch; p has 3-5 still to take, q 5.
	lease := func(proc string, seq int64, max int, storeToo bool) {
		t.Helper()
		l := store.Lease{CampaignKey: key, CampaignID: t.Name(), Processor: proc, ID: 1<<32 | seq}
		got, err := s.LeaseDeliveries(ctx, l, max, 1<<10, 1<<20, 100)
		if err != nil || len(got.Pages) != max {
			t.Fatalf("lease for %s: %d pages (%v), want %d", proc, len(got.Pages), err, max)
		}
		if !storeToo {
			return
		}
		var done []store.Processed
		for _, p := range got.Pages {
			done = append(done, store.Processed{ID: p.ID})
		}
		if n, err := s.StoreProcessed(ctx, l, done); err != nil || n != max {
			t.Fatalf("store %s's batch: %d (%v)", proc, n, err)
		}
	}
	lease("p", 1, 3, true)  // 0-2
	lease("q", 2, 3, true)  // 0-2
	lease("q", 3, 2, false) // 3 and 4
	// Page 6 kept per page, its body in page_bodies and a deliveries row
	// for each processor, as releases before v0.11.0 kept pages: a
	// campaign of theirs, terminated and started again under its ID (see
	// docs/upgrading.md), is finished by this release.
	if _, err := s.Pool().Exec(ctx, `
		WITH b AS (
			INSERT INTO page_bodies (url_id, campaign, final_url, status, headers, fetched_at, body, sha256, token)
			VALUES ($1, $2, 'http://a.test/', 200, '{}', now(), 'private body', '', 'old'))
		INSERT INTO deliveries (campaign, processor, url_id) VALUES ($2, 'p', $1), ($2, 'q', $1)`, claimed[6].ID, key); err != nil {
		t.Fatal(err)
	}

	sum, err := s.FinishCampaign(ctx, key, campaign.OutcomeCancelled, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := bodyRowsOf(t, s, key); got != "0 chunks, 0 page_bodies, 0 deliveries waiting, 0 batches out" {
		t.Errorf("after the cancelled finish: %s; want nothing kept", got)
	}
	// The summary is the run's as it ended: 7 fetched, 3 leased.
	if sum.Outcome != campaign.OutcomeCancelled || sum.Fetched != 7 || sum.Leased != 3 || sum.Pending != 0 || sum.Unprocessed != 4 {
		t.Errorf("summary %+v: want cancelled, 7 fetched, 3 leased, 4 unprocessed", sum)
	}
	states := func() string {
		t.Helper()
		var out []string
		for _, id := range all {
			var state, reason string
			if err := s.Pool().QueryRow(ctx, `SELECT state::text, coalesce(last_error, '') FROM frontier WHERE id = $1`, id).
				Scan(&state, &reason); err != nil {
				t.Fatal(err)
			}
			if strings.Contains(reason, "body dropped: campaign cancelled") {
				state += " (body dropped)"
			}
			out = append(out, state)
		}
		return strings.Join(out, ", ")
	}
	want := "fetched, fetched, fetched, " + strings.Repeat("pending (body dropped), ", 4) + "pending, pending, pending"
	if got := states(); got != want {
		t.Errorf("frontier after the finish:\n%s\nwant:\n%s", got, want)
	}
	st, err := harness.ProcessorStatus(ctx, s, key)
	if err != nil {
		t.Fatal(err)
	}
	for proc, processed := range map[string]int64{"p": 3, "q": 3} {
		if c := st[proc]; c.Pending != 0 || c.Leased != 0 || c.Processed != processed {
			t.Errorf("processor %s after the finish: %+v, want %d processed, nothing waiting", proc, c, processed)
		}
	}

	// The activity retried after its commit: the same summary.
	again, err := s.FinishCampaign(ctx, key, campaign.OutcomeCancelled, 1)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(again.Fetched, again.Pending, again.Leased, again.Unprocessed) != fmt.Sprint(sum.Fetched, sum.Pending, sum.Leased, sum.Unprocessed) {
		t.Errorf("retried finish: %+v, want the first's %+v", again, sum)
	}

	// n1 was still fetching 7-9: its commit comes after the finish.
	commit(0, fetchedFor(claimed[7]), fetchedFor(claimed[8]))
	if got := bodyRowsOf(t, s, key); got != "0 chunks, 0 page_bodies, 0 deliveries waiting, 0 batches out" {
		t.Errorf("after a commit that came late: %s; want nothing kept", got)
	}

	// Started again under its ID, the campaign fetches what went back.
	spec, err := s.CampaignSpec(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, existed, err := s.CreateCampaign(ctx, t.Name(), spec); err != nil || !existed {
		t.Fatalf("start again: existed %v, %v", existed, err)
	}
	l := leaseAll(t, s, key, 20)
	if got, want := ids(l), all[3:]; len(got) != len(want) || !containsAll(got, want) {
		t.Errorf("the run started again leased %v, want %v", got, want)
	}
}

func containsAll(got, want []int64) bool {
	in := map[int64]bool{}
	for _, id := range got {
		in[id] = true
	}
	for _, id := range want {
		if !in[id] {
			return false
		}
	}
	return true
}

// TestCancelledRecurringCampaignRefetchesItsUnprocessedPages: in a
// recurring campaign, a page put back to pending because its body was
// dropped would be skipped again, as not due or not modified, and never
// reach the processors. Its series forgets the fetch of its last version
// instead: it is due at once, and asked without validators. A page every
// processor took keeps its history.
func TestCancelledRecurringCampaignRefetchesItsUnprocessedPages(t *testing.T) {
	s := harness.OpenStore(t)
	const series = "weekly"
	key, n1, _, claimed := processedCampaign(t, s, func(spec *campaign.Spec) {
		spec.Recrawl = &campaign.Recrawl{Series: series}
	})
	if res, err := s.Commit(ctx, key, n1, "n1", []store.Outcome{fetchedFor(claimed[0]), fetchedFor(claimed[1])}, nil); err != nil || len(res.Accepted) != 2 {
		t.Fatalf("commit accepted %v (%v), want 2 pages", res.Accepted, err)
	}
	fps := map[int64]int64{}
	for _, c := range claimed[:2] {
		var fp int64
		if err := s.Pool().QueryRow(ctx, `SELECT fingerprint FROM frontier WHERE id = $1`, c.ID).Scan(&fp); err != nil {
			t.Fatal(err)
		}
		fps[c.ID] = fp
		// Seen twice unchanged: its interval is an hour and more, so it is
		// not due, and it would be asked with its validators.
		for range 2 {
			v := store.Visit{Fingerprint: fp, URL: c.URL, Kind: store.VisitFetched, Status: 200,
				ETag: `"v1"`, LastModified: "Mon, 01 Jun 2026 00:00:00 GMT", Digest: "sha256:1", At: time.Now()}
			if err := s.RecordVisits(ctx, series, time.Hour, 24*time.Hour, []store.Visit{v}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Both processors take page 0; page 1 waits.
	for i, proc := range []string{"p", "q"} {
		l := store.Lease{CampaignKey: key, CampaignID: t.Name(), Processor: proc, ID: 1<<32 | int64(i+1)}
		got, err := s.LeaseDeliveries(ctx, l, 1, 1<<10, 1<<20, 100)
		if err != nil || len(got.Pages) != 1 || got.Pages[0].ID != claimed[0].ID {
			t.Fatalf("lease for %s: %+v (%v), want page %d", proc, got.Pages, err, claimed[0].ID)
		}
		if n, err := s.StoreProcessed(ctx, l, []store.Processed{{ID: claimed[0].ID}}); err != nil || n != 1 {
			t.Fatalf("store %s's batch: %d (%v)", proc, n, err)
		}
	}
	if sum, err := s.FinishCampaign(ctx, key, campaign.OutcomeCancelled, 1); err != nil || sum.Unprocessed != 1 {
		t.Fatalf("finish: %+v (%v), want 1 page unprocessed", sum, err)
	}
	h, err := s.History(ctx, series, []int64{fps[claimed[0].ID], fps[claimed[1].ID]})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if done := h[fps[claimed[0].ID]]; done == nil || done.Due(now) || done.ETag == "" {
		t.Errorf("history of the page processed: %+v, want it kept (not due, its validators)", done)
	}
	if back := h[fps[claimed[1].ID]]; back == nil || !back.Due(now) || back.ETag != "" || back.LastModified != "" || back.Digest == "" {
		t.Errorf("history of the page put back: %+v, want it due, without validators, its digest kept", back)
	}
}
