package store_test

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/store"
	"github.com/spiderpool/spiderpool/tests/harness"
)

// chunkedCampaign commits pages, kept in chunks: the
// first commit 5 pages and one it never claimed, the second 3, the third
// only one it never claimed, all wanted by processors p and q; it says
// the 8 pages recorded.
func chunkedCampaign(t *testing.T, s *store.Store) (key int64, pages []int64) {
	t.Helper()
	var raw []string
	for i := range 10 {
		raw = append(raw, fmt.Sprintf("http://a.test/%d", i))
	}
	key, n1, all, claimed := claimPages(t, s, 8, raw...)
	fetched := func(id int64) store.Outcome {
		c := store.ClaimedURL{URL: "never claimed"}
		if i := slices.IndexFunc(claimed, func(c store.ClaimedURL) bool { return c.ID == id }); i >= 0 {
			c = claimed[i]
		}
		return store.Outcome{ID: id, State: store.Fetched, Attempted: true, Status: 200,
			Page: &store.Page{Status: 200, ContentType: "text/html", FetchedAt: time.Now()},
			Body: &store.PageBody{Processors: []string{"p", "q"}, URL: c.URL, Depth: c.Depth, FinalURL: fmt.Sprintf("http://final.test/%d", id),
				Status: 200, Header: http.Header{"Etag": {"x"}}, ContentType: "text/html", FetchedAt: time.Now(),
				Body: []byte(fmt.Sprint("body ", id))}}
	}
	commit := func(want int, ids ...int64) {
		t.Helper()
		var outs []store.Outcome
		for _, id := range ids {
			outs = append(outs, fetched(id))
		}
		res, err := s.Commit(ctx, key, n1, "n1", outs, nil)
		if err != nil || len(res.Accepted) != want {
			t.Fatalf("commit accepted %v (%v), want %d pages", res.Accepted, err, want)
		}
	}
	commit(5, all[8], all[4], all[0], all[1], all[2], all[3]) // all[8] was never claimed
	// all[0] again, as a retried commit sends it: refused, its body is in
	// the second chunk too, where no delivery points to it.
	commit(3, all[0], all[5], all[6], all[7])
	commit(0, all[9])
	return key, all[:8]
}

// TestChunkedPagesAreDeliveredOnce: pages kept in chunks go out to each
// processor once, whole chunks or the head of one per lease, in id order,
// with their URL, depth, final URL and bodies, inline or by token; a page
// the commit did not record is never delivered; a batch of an ended run
// puts its pages back; and a chunk goes once every processor has stored
// its pages.
func TestChunkedPagesAreDeliveredOnce(t *testing.T) {
	s := harness.OpenStore(t)
	key, pages := chunkedCampaign(t, s)
	var chunks int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM body_chunks WHERE campaign = $1`, key).Scan(&chunks); err != nil || chunks != 2 {
		t.Fatalf("%d chunks kept (%v), want one for each commit that recorded pages", chunks, err)
	}
	status := func(name string) harness.ProcessorCounts {
		t.Helper()
		st, err := harness.ProcessorStatus(ctx, s, key)
		if err != nil {
			t.Fatal(err)
		}
		return st[name]
	}
	if c := status("p"); c.Pending != 8 || c.Leased != 0 {
		t.Errorf("before any lease: p %+v, want 8 pending", c)
	}
	if n, err := s.DeliveriesWaiting(ctx, key, "q", 100); err != nil || n != 8 {
		t.Errorf("q: %d pages waiting (%v), want 8", n, err)
	}
	lease := func(proc string, run, seq int64, max int, inline int64) store.DeliveryLease {
		t.Helper()
		l, err := s.LeaseDeliveries(ctx, store.Lease{CampaignKey: key, CampaignID: "c", Processor: proc, ID: run<<32 | seq},
			max, inline, 1<<20, 100)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	idsOf := func(l store.DeliveryLease) []int64 {
		var out []int64
		for _, p := range l.Pages {
			out = append(out, p.ID)
		}
		return out
	}

	// p: 3 pages (the head of the first chunk), then 4 (the rest of it
	// and the head of the second), then the last; each lease asked again
	// answers with the pages it holds.
	first := lease("p", 1, 1, 3, 1<<10)
	if got := idsOf(first); fmt.Sprint(got) != fmt.Sprint(pages[:3]) || first.Waiting != 5 {
		t.Fatalf("p's first lease: %v, %d waiting; want %v, 5 waiting", got, first.Waiting, pages[:3])
	}
	for _, p := range first.Pages {
		want := fmt.Sprint("body ", p.ID)
		if string(p.Body) != want || p.FinalURL != fmt.Sprintf("http://final.test/%d", p.ID) || p.URL == "" || p.Header == nil || p.Length != int64(len(want)) {
			t.Errorf("leased page %+v, want body %q and its final URL", p, want)
		}
		if body, ctype, err := s.Body(ctx, p.Token); err != nil || string(body) != want || ctype != "text/html" {
			t.Errorf("Body(%s) = %q, %q, %v; want %q", p.Token, body, ctype, err, want)
		}
	}
	if again := lease("p", 1, 1, 3, 1<<10); fmt.Sprint(idsOf(again)) != fmt.Sprint(pages[:3]) {
		t.Errorf("p's first lease asked again: %v, want %v", idsOf(again), pages[:3])
	}
	second := lease("p", 1, 2, 4, 0) // bodies by token only
	if got := idsOf(second); fmt.Sprint(got) != fmt.Sprint(pages[3:7]) {
		t.Fatalf("p's second lease: %v, want %v", got, pages[3:7])
	}
	var tokens []string
	for _, p := range second.Pages {
		if p.Body != nil || p.Token == "" {
			t.Errorf("page %d of a lease with no inline room: body %q, token %q", p.ID, p.Body, p.Token)
		}
		tokens = append(tokens, p.Token)
	}
	bodies, err := s.Bodies(ctx, append(tokens, tokens[0][:48]+"00000000000000000000000000000000"))
	if err != nil || len(bodies) != 4 {
		t.Errorf("Bodies: %d found (%v), want the 4 with their secrets", len(bodies), err)
	}
	if c := status("p"); c.Pending != 1 || c.Leased != 7 {
		t.Errorf("with two batches out: p %+v, want 1 pending, 7 in flight", c)
	}
	// The links a processor returns are resolved against the page's final URL.
	lp, err := s.DeliveryPages(ctx, store.Lease{CampaignKey: key, Processor: "p", ID: 1<<32 | 2}, pages[3:5])
	if err != nil || lp[pages[4]].FinalURL != fmt.Sprintf("http://final.test/%d", pages[4]) {
		t.Errorf("DeliveryPages: %+v (%v), want the final URL kept in the chunk", lp, err)
	}

	// A new run: the first run's batches put their pages back.
	if n, err := s.ReleaseDeliveries(ctx, key, "p", campaign.LeaseRun(2<<32)); err != nil || n != 7 {
		t.Fatalf("released %d (%v), want the 7 pages of run 1", n, err)
	}
	if c := status("p"); c.Pending != 8 || c.Leased != 0 {
		t.Errorf("after the release: p %+v, want 8 pending", c)
	}
	whole := lease("p", 2, 1, 100, 1<<10)
	if got := idsOf(whole); fmt.Sprint(got) != fmt.Sprint(pages) {
		t.Fatalf("p's lease after the release: %v, want every page once: %v", got, pages)
	}
	storeAll := func(proc string, run, seq int64, l store.DeliveryLease) {
		t.Helper()
		var results []store.Processed
		for _, p := range l.Pages {
			results = append(results, store.Processed{ID: p.ID})
		}
		n, err := s.StoreProcessed(ctx, store.Lease{CampaignKey: key, CampaignID: "c", Processor: proc, ID: run<<32 | seq}, results)
		if err != nil || n != len(results) {
			t.Fatalf("store %s's batch: %d (%v), want %d", proc, n, err, len(results))
		}
	}
	storeAll("p", 2, 1, whole)
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM body_chunks WHERE campaign = $1`, key).Scan(&chunks); err != nil || chunks != 2 {
		t.Fatalf("after p: %d chunks kept (%v), want both (q has still to take them)", chunks, err)
	}
	// q takes the pages in two batches: the first the first chunk and the
	// head of the second, which goes only with the second batch's store.
	qa, qb := lease("q", 2, 1, 6, 1<<10), lease("q", 2, 2, 6, 1<<10)
	if len(qa.Pages) != 6 || len(qb.Pages) != 2 {
		t.Fatalf("q's leases: %d and %d pages, want 6 and 2", len(qa.Pages), len(qb.Pages))
	}
	storeAll("q", 2, 1, qa)
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM body_chunks WHERE campaign = $1`, key).Scan(&chunks); err != nil || chunks != 1 {
		t.Fatalf("after q's first batch: %d chunks kept (%v), want the second (q's second batch holds pages of it)", chunks, err)
	}
	storeAll("q", 2, 2, qb)
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM body_chunks WHERE campaign = $1`, key).Scan(&chunks); err != nil || chunks != 0 {
		t.Errorf("after every batch: %d chunks kept (%v), want none", chunks, err)
	}
	for _, name := range []string{"p", "q"} {
		if c := status(name); c.Processed != 8 || c.Pending != 0 || c.Leased != 0 {
			t.Errorf("at the end: %s %+v, want 8 processed", name, c)
		}
	}
}

// TestUnheldChunksAreDropped: a chunk that nothing refers to (its batch
// stored by a node built before chunks) goes; one with pages still to
// take, or in a batch out, stays.
func TestUnheldChunksAreDropped(t *testing.T) {
	s := harness.OpenStore(t)
	key, _ := chunkedCampaign(t, s)
	chunks := int64s(t, s, `SELECT coalesce(array_agg(id ORDER BY id), '{}') FROM body_chunks WHERE campaign = $1`, key)
	if len(chunks) != 2 {
		t.Fatalf("chunks %v, want 2", chunks)
	}
	// The first chunk: q's pages in a batch out, p's stored the old way
	// (the batch row gone, the chunk left). The second: pages to take.
	l := store.Lease{CampaignKey: key, CampaignID: "c", Processor: "q", ID: 1<<32 | 1}
	if lease, err := s.LeaseDeliveries(ctx, l, 5, 1<<10, 1<<20, 100); err != nil || len(lease.Pages) != 5 {
		t.Fatalf("q's lease: %d pages (%v), want the first chunk's 5", len(lease.Pages), err)
	}
	if _, err := s.Pool().Exec(ctx, `DELETE FROM chunk_deliveries WHERE campaign = $1 AND processor = 'p' AND chunk = $2`, key, chunks[0]); err != nil {
		t.Fatal(err)
	}
	kept := func() []int64 {
		t.Helper()
		return int64s(t, s, `SELECT coalesce(array_agg(id ORDER BY id), '{}') FROM body_chunks WHERE campaign = $1`, key)
	}
	if n, err := s.DropUnheldChunks(ctx, key); err != nil || n != 0 || fmt.Sprint(kept()) != fmt.Sprint(chunks) {
		t.Fatalf("dropped %d (%v), kept %v: want both kept (q's batch holds the first, the second has pages to take)", n, err, kept())
	}
	if _, err := s.Pool().Exec(ctx, `DELETE FROM delivery_batches WHERE campaign = $1`, key); err != nil {
		t.Fatal(err)
	}
	if n, err := s.DropUnheldChunks(ctx, key); err != nil || n != 1 || fmt.Sprint(kept()) != fmt.Sprint(chunks[1:]) {
		t.Errorf("dropped %d (%v), kept %v: want the first dropped, %v kept", n, err, kept(), chunks[1:])
	}
}

// TestBodyTokenOpensOnlyItsPage: a body token carries a secret of its own
// page, not the chunk's: the token of one page with another page's id
// (of the same chunk) reads nothing, nor does one with its chunk's secret.
func TestBodyTokenOpensOnlyItsPage(t *testing.T) {
	s := harness.OpenStore(t)
	key, pages := chunkedCampaign(t, s)
	l, err := s.LeaseDeliveries(ctx, store.Lease{CampaignKey: key, CampaignID: "c", Processor: "p", ID: 1<<32 | 1}, 2, 0, 1<<20, 100)
	if err != nil || len(l.Pages) != 2 || l.Pages[0].ID != pages[0] || l.Pages[1].ID != pages[1] {
		t.Fatalf("lease %+v (%v), want the first two pages", l.Pages, err)
	}
	tok := l.Pages[0].Token
	if body, _, err := s.Body(ctx, tok); err != nil || string(body) != fmt.Sprint("body ", pages[0]) {
		t.Fatalf("Body(own token) = %q, %v", body, err)
	}
	forged := tok[:16] + fmt.Sprintf("%016x", pages[2]) + tok[32:] // same chunk, a page this lease did not give
	if body, _, err := s.Body(ctx, forged); !errors.Is(err, store.ErrNoBody) {
		t.Errorf("Body(token with page %d's id) = %q, %v; want ErrNoBody", pages[2], body, err)
	}
	if got, err := s.Bodies(ctx, []string{forged}); err != nil || len(got) != 0 {
		t.Errorf("Bodies(forged) = %d bodies, %v; want none", len(got), err)
	}
	var secret string
	if err := s.Pool().QueryRow(ctx, `SELECT secret FROM body_chunks WHERE campaign = $1 ORDER BY id LIMIT 1`, key).Scan(&secret); err != nil {
		t.Fatal(err)
	}
	if tok[32:] == secret {
		t.Errorf("the token carries its chunk's secret: it opens every page of the chunk")
	}
}
