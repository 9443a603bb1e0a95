package store_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/store"
	"github.com/spiderpool/spiderpool/tests/harness"
)

// TestCommitCarriesTheItemsOfTheLastVersion: a URL settled unchanged
// (304, or not due) with a Carry gets, in the commit that records it, the
// items its last version got in the run that fetched it, for the
// processors named and marked carried from that run; nothing when that
// run's page is not the version the series knows (a stale pointer), and
// nothing for an outcome the commit does not record.
func TestCommitCarriesTheItemsOfTheLastVersion(t *testing.T) {
	s := harness.OpenStore(t)
	raw := []string{"http://a.test/0", "http://a.test/1", "http://a.test/2", "http://a.test/3", "http://a.test/4"}

	key, n1, all, claimed := claimPages(t, s, 4, raw...)
	var refused string // the URL not claimed, whose outcome the commit refuses
	idOf := map[string]int64{}
	for _, u := range raw {
		var id int64
		if err := s.Pool().QueryRow(ctx, `SELECT id FROM frontier WHERE campaign = $1 AND url = $2`, key, u).Scan(&id); err != nil {
			t.Fatal(err)
		}
		idOf[u] = id
		if !slices.ContainsFunc(claimed, func(c store.ClaimedURL) bool { return c.ID == id }) {
			refused = u
		}
	}
	if len(all) != len(raw) || refused == "" {
		t.Fatalf("leased %v, claimed %v: want one of %d left unclaimed", all, claimed, len(raw))
	}
	stale := claimed[1].URL

	// The run that fetched the versions: each page has digest "d-<url>"
	// (the stale one an older version), and items of processors p and q.
	spec, err := campaign.Spec{Seeds: []string{"http://a.test/"}}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	src, _, err := s.CreateCampaign(ctx, t.Name()+"-before", spec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.InsertURLs(ctx, src, urls(t, raw...)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, `
		WITH p AS (
			INSERT INTO pages (url_id, campaign, status, content_length, content_digest, fetched_at, duration_ms, node)
			SELECT id, campaign, 200, 10, CASE WHEN url = $2 THEN 'older' ELSE 'd-' || url END, now(), 1, 'n'
			FROM frontier WHERE campaign = $1
		)
		INSERT INTO items (campaign, processor, url_id, seq, item)
		SELECT campaign, proc, id, seq, jsonb_build_object('url', url, 'proc', proc, 'seq', seq)
		FROM frontier, unnest(ARRAY['p', 'q']) AS proc, generate_series(0, 1) AS seq WHERE campaign = $1`, src, stale); err != nil {
		t.Fatal(err)
	}

	notModified := func(u string, procs ...string) store.Outcome {
		return store.Outcome{ID: idOf[u], State: store.Fetched, Attempted: true, Status: 304,
			Page:  &store.Page{Status: 304, Digest: "d-" + u, FetchedAt: time.Now()},
			Carry: &store.Carry{From: src, Digest: "d-" + u, Processors: procs}}
	}
	notDue := func(u string, procs ...string) store.Outcome {
		return store.Outcome{ID: idOf[u], State: store.Excluded, Error: "recrawl: not due",
			Carry: &store.Carry{From: src, Digest: "d-" + u, Processors: procs}}
	}
	res, err := s.Commit(ctx, key, n1, "n1", []store.Outcome{
		notModified(claimed[0].URL, "p"), notModified(stale, "p"), notDue(claimed[2].URL, "q"), notDue(claimed[3].URL, "p", "q"),
		notDue(refused, "p"),
	}, nil)
	if err != nil || len(res.Accepted) != 4 {
		t.Fatalf("commit accepted %v (%v), want the 4 pages claimed", res.Accepted, err)
	}

	var got []string
	if _, err := s.ExportItems(ctx, key, "", func(it store.Item) error {
		got = append(got, fmt.Sprintf("%s %s %s from %s", it.Processor, it.URL, it.Item, it.CarriedFrom))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	item := func(proc, u string, seq int) string {
		return fmt.Sprintf(`%s %s {"seq": %d, "url": "%s", "proc": "%s"} from %s`, proc, u, seq, u, proc, t.Name()+"-before")
	}
	want := []string{
		item("p", claimed[0].URL, 0), item("p", claimed[0].URL, 1),
		item("p", claimed[3].URL, 0), item("p", claimed[3].URL, 1),
		item("q", claimed[2].URL, 0), item("q", claimed[2].URL, 1),
		item("q", claimed[3].URL, 0), item("q", claimed[3].URL, 1),
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("items after the commit:\n%q\nwant (none of the page whose version is older, none of the page refused):\n%q", got, want)
	}
}
