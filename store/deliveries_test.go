package store_test

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/store"
	"github.com/spiderpool/spiderpool/tests/harness"
)

// queueForProcessor commits n fetched pages of a new campaign, kept for
// processor p in one chunk (each body "body", header Etag x); it says the
// campaign and the pages, in id order.
func queueForProcessor(t *testing.T, s *store.Store, n int) (key int64, pages []int64) {
	t.Helper()
	var raw []string
	for i := range n {
		raw = append(raw, fmt.Sprintf("http://a.test/%d", i))
	}
	key, n1, _, claimed := claimPages(t, s, n, raw...)
	var outs []store.Outcome
	for _, c := range claimed {
		outs = append(outs, store.Outcome{ID: c.ID, State: store.Fetched, Attempted: true, Status: 200,
			Page: &store.Page{Status: 200, ContentType: "text/html", FetchedAt: time.Now()},
			Body: &store.PageBody{Processors: []string{"p"}, URL: c.URL, Depth: c.Depth, FinalURL: c.URL, Status: 200,
				Header: http.Header{"Etag": {"x"}}, ContentType: "text/html", FetchedAt: time.Now(), Body: []byte("body")}})
		pages = append(pages, c.ID)
	}
	if res, err := s.Commit(ctx, key, n1, "n1", outs, nil); err != nil || len(res.Accepted) != n {
		t.Fatalf("commit accepted %v (%v), want %d pages", res.Accepted, err, n)
	}
	slices.Sort(pages)
	return key, pages
}

// runLeases leases up to 3 of processor p's pages under lease seq of a
// run, and gives their ids.
func runLeases(t *testing.T, s *store.Store, key int64) func(run, seq int64) []int64 {
	return func(run, seq int64) []int64 {
		t.Helper()
		l, err := s.LeaseDeliveries(ctx, store.Lease{CampaignKey: key, CampaignID: "c", Processor: "p", ID: run<<32 | seq},
			3, 1<<10, 1<<20, 100)
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for _, p := range l.Pages {
			ids = append(ids, p.ID)
		}
		return ids
	}
}

// TestBatchByReference: a batch leased by reference is named by a token,
// the same when the lease is asked again; the token serves the batch's
// pages, each body by its own token, until the batch's outcome is stored
// or a later run resets the lease.
func TestBatchByReference(t *testing.T) {
	s := harness.OpenStore(t)
	key, _ := queueForProcessor(t, s, 5)
	const run = int64(5)
	lease := func(processor string, id int64) store.Lease {
		return store.Lease{CampaignKey: key, CampaignID: "c", Processor: processor, ID: id}
	}
	first, err := s.LeaseBatch(ctx, lease("p", run<<32|1), 3, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(first.IDs) != 3 || first.Token == "" || first.Waiting != 2 {
		t.Fatalf("leased %+v: want 3 pages, a token, 2 waiting", first)
	}
	again, err := s.LeaseBatch(ctx, lease("p", run<<32|1), 3, 100)
	if err != nil {
		t.Fatal(err)
	}
	if again.Token != first.Token || fmt.Sprint(again.IDs) != fmt.Sprint(first.IDs) {
		t.Errorf("the lease asked again gave %+v, want %+v", again, first)
	}
	b, err := s.BatchByToken(ctx, first.Token, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if b.CampaignKey != key || b.CampaignID != "c" || b.Processor != "p" || len(b.Pages) != 3 {
		t.Fatalf("batch %+v: want campaign %d (c), processor p, 3 pages", b, key)
	}
	for i, p := range b.Pages {
		var h http.Header
		if err := json.Unmarshal(p.Header, &h); err != nil || h.Get("Etag") != "x" {
			t.Errorf("page %d: headers %s (%v): want Etag x", i, p.Header, err)
		}
		if p.ID != first.IDs[i] || p.Body != nil || p.Token == "" || p.Length != 4 {
			t.Errorf("page %d: %+v: want page %d, its body by token only", i, p, first.IDs[i])
		}
		if body, _, err := s.Body(ctx, p.Token); err != nil || string(body) != "body" {
			t.Errorf("page %d: Body(%s) = %q, %v; want %q", i, p.Token, body, err, "body")
		}
	}
	// Asked with room for bodies, the batch carries them in its pages.
	inline, err := s.BatchByToken(ctx, first.Token, 1<<10, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range inline.Pages {
		if string(p.Body) != "body" {
			t.Errorf("page %d asked with its body inline: body %q, want %q", i, p.Body, "body")
		}
	}
	if _, err := s.StoreProcessed(ctx, lease("p", run<<32|1), []store.Processed{{ID: first.IDs[0]}, {ID: first.IDs[1]}, {ID: first.IDs[2]}}); err != nil {
		t.Fatal(err)
	}
	// Stored, the batch serves nothing: its row went with the store.
	if _, err := s.BatchByToken(ctx, first.Token, 0, 0); !errors.Is(err, store.ErrNoBatch) {
		t.Errorf("a stored batch's token gave %v, want ErrNoBatch", err)
	}
	named := func(token string) int {
		t.Helper()
		var n int
		if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM delivery_batches WHERE token = $1`, token).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := named(first.Token); n != 0 {
		t.Errorf("a stored batch is still named %d times", n)
	}
	// A batch of an ended run: the next run's reset drops its token.
	orphan, err := s.LeaseBatch(ctx, lease("p", (run+1)<<32|1), 3, 100)
	if err != nil || len(orphan.IDs) != 2 {
		t.Fatalf("lease: %+v, %v: want the 2 pages left", orphan, err)
	}
	if _, err := s.ReleaseDeliveries(ctx, key, "p", run+2); err != nil {
		t.Fatal(err)
	}
	if n := named(orphan.Token); n != 0 {
		t.Errorf("a batch of an ended run is still named %d times after the next run's reset", n)
	}
	if empty, err := s.LeaseBatch(ctx, lease("other", run<<32|1), 3, 100); err != nil || len(empty.IDs) != 0 || empty.Token != "" {
		t.Errorf("a lease of nothing: %+v, %v: want no pages and no token", empty, err)
	}
}

// TestStoreProcessedRecordsOnce: a batch's outcome is recorded once: done
// pages count as processed with their items, a failed one keeps its
// error, and the same outcome stored again changes nothing. The chunk
// stays while a page of it waits, and goes with the last page's store.
func TestStoreProcessedRecordsOnce(t *testing.T) {
	s := harness.OpenStore(t)
	key, _ := queueForProcessor(t, s, 4)
	l := store.Lease{CampaignKey: key, CampaignID: "c", Processor: "p", ID: 3<<32 | 1}
	lease, err := s.LeaseDeliveries(ctx, l, 3, 1<<10, 1<<20, 100)
	if err != nil || len(lease.Pages) != 3 {
		t.Fatalf("lease: %d pages, %v: want 3", len(lease.Pages), err)
	}
	status := func() harness.ProcessorCounts {
		t.Helper()
		st, err := harness.ProcessorStatus(ctx, s, key)
		if err != nil {
			t.Fatal(err)
		}
		return st["p"]
	}
	if c := status(); c.Leased != 3 || c.Pending != 1 || c.Processed != 0 {
		t.Errorf("while the batch is out: %+v, want 3 in flight and 1 pending", c)
	}
	ids := []int64{lease.Pages[0].ID, lease.Pages[1].ID, lease.Pages[2].ID}
	results := []store.Processed{
		{ID: ids[0], Items: []json.RawMessage{json.RawMessage(`{"a":1}`), json.RawMessage(`{"a":2}`)}},
		{ID: ids[1], Error: "boom"},
		{ID: ids[2]},
	}
	for i, want := range []int{3, 0} {
		n, err := s.StoreProcessed(ctx, l, results)
		if err != nil || n != want {
			t.Errorf("store #%d: %d pages recorded, %v: want %d", i+1, n, err, want)
		}
	}
	c := status()
	if c.Processed != 2 || c.Failed != 1 || c.Items != 2 || c.Pending != 1 || c.Leased != 0 || c.LastError != "boom" {
		t.Errorf("after the store: %+v, want 2 processed with 2 items, 1 failed (boom), 1 pending", c)
	}
	chunks := func() int {
		t.Helper()
		var n int
		if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM body_chunks WHERE campaign = $1`, key).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	var items int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM items WHERE campaign = $1`, key).Scan(&items); err != nil {
		t.Fatal(err)
	}
	if n := chunks(); n != 1 || items != 2 {
		t.Errorf("%d chunks and %d items kept, want the pending page's chunk and 2 items", n, items)
	}
	if n, err := s.DeliveriesWaiting(ctx, key, "p", 10); err != nil || n != 1 {
		t.Errorf("%d pages waiting, %v: want 1", n, err)
	}
	last := store.Lease{CampaignKey: key, CampaignID: "c", Processor: "p", ID: 3<<32 | 2}
	lease, err = s.LeaseDeliveries(ctx, last, 3, 1<<10, 1<<20, 100)
	if err != nil || len(lease.Pages) != 1 {
		t.Fatalf("the last lease: %d pages, %v: want 1", len(lease.Pages), err)
	}
	if n, err := s.StoreProcessed(ctx, last, []store.Processed{{ID: lease.Pages[0].ID}}); err != nil || n != 1 {
		t.Fatalf("the last store: %d pages, %v: want 1", n, err)
	}
	if n := chunks(); n != 0 {
		t.Errorf("%d chunks kept after every page was stored, want none", n)
	}
}

// int64s is the array of int64 a query answers with.
func int64s(t *testing.T, s *store.Store, query string, args ...any) []int64 {
	t.Helper()
	var out []int64
	if err := s.Pool().QueryRow(ctx, query, args...).Scan(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

// claimPages starts a campaign of a.test with raw URLs, leases them all
// and claims the first claim of them (in lease order) for holder n1: it
// says every URL leased, and the claims.
func claimPages(t *testing.T, s *store.Store, claim int, raw ...string) (key int64, n1 string, all []int64, claimed []store.ClaimedURL) {
	t.Helper()
	key = newCampaign(t, s, "http://a.test/")
	n1 = holder(t, s, "n1", "1")
	if _, err := s.InsertURLs(ctx, key, urls(t, raw...)); err != nil {
		t.Fatal(err)
	}
	l := leaseAll(t, s, key, 10)
	all = ids(l)
	claimed, err := s.Claim(ctx, key, l.LeaseID, all[:claim], n1, "n1", time.Minute)
	if err != nil || len(claimed) != claim {
		t.Fatalf("claimed %d of %d (%v)", len(claimed), claim, err)
	}
	return key, n1, all, claimed
}

// TestChunksAreKeptCompressed: a chunk over Postgres's 2 KB threshold is
// kept compressed with lz4 when it compresses (migration 0019), one that
// does not as it came; each page reads back by its token as it was
// fetched.
func TestChunksAreKeptCompressed(t *testing.T) {
	s := harness.OpenStore(t)
	key, n1, all, _ := claimPages(t, s, 4, "http://a.test/small", "http://a.test/medium", "http://a.test/large", "http://a.test/random")
	html := func(size int) []byte {
		var b bytes.Buffer
		b.WriteString("<!doctype html><html><body><ul>\n")
		for i := 0; b.Len() < size; i++ {
			fmt.Fprintf(&b, "<li><a href=\"/item/%d.html\" class=\"item\">Item %d</a> <span class=\"price\">%d.99</span></li>\n", i, i, i%97)
		}
		return b.Bytes()
	}
	noise := make([]byte, 6000)
	if _, err := rand.Read(noise); err != nil {
		t.Fatal(err)
	}
	bodies := map[int64][]byte{all[0]: html(1000), all[1]: html(5000), all[2]: html(200_000), all[3]: noise}
	commit := func(ids ...int64) {
		t.Helper()
		var outcomes []store.Outcome
		for _, id := range ids {
			outcomes = append(outcomes, store.Outcome{ID: id, State: store.Fetched, Attempted: true, Status: 200,
				Page: &store.Page{Status: 200, ContentType: "text/html", FetchedAt: time.Now()},
				Body: &store.PageBody{Processors: []string{"p"}, FinalURL: "http://a.test/", Status: 200,
					Header: http.Header{"Etag": {"x"}}, ContentType: "text/html", FetchedAt: time.Now(), Body: bodies[id]}})
		}
		if res, err := s.Commit(ctx, key, n1, "n1", outcomes, nil); err != nil || len(res.Accepted) != len(ids) {
			t.Fatalf("commit accepted %v (%v), want %d pages", res.Accepted, err, len(ids))
		}
	}
	commit(all[:3]...) // the HTML pages: one chunk
	commit(all[3])     // the noise: another
	if got, want := compressions(t, s, key), []string{"lz4", "none"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("chunks kept compressed as %v, want %v", got, want)
	}
	lease, err := s.LeaseDeliveries(ctx, store.Lease{CampaignKey: key, CampaignID: "c", Processor: "p", ID: 1 << 32}, 10, 0, 0, 100)
	if err != nil || len(lease.Pages) != len(all) {
		t.Fatalf("lease: %d pages (%v), want %d", len(lease.Pages), err, len(all))
	}
	for _, p := range lease.Pages {
		body, _, err := s.Body(ctx, p.Token)
		if err != nil || !bytes.Equal(body, bodies[p.ID]) {
			t.Errorf("page %d: body of %d bytes read back as %d (%v)", p.ID, len(bodies[p.ID]), len(body), err)
		}
	}
}

// compressions is how each of a campaign's chunks is compressed, in
// chunk order ("none" for one kept as it came).
func compressions(t *testing.T, s *store.Store, key int64) []string {
	t.Helper()
	var out []string
	if err := s.Pool().QueryRow(ctx, `
		SELECT coalesce(array_agg(coalesce(pg_column_compression(pages), 'none') ORDER BY id), '{}')
		FROM body_chunks WHERE campaign = $1`, key).Scan(&out); err != nil {
		t.Fatal(err)
	}
	return out
}
