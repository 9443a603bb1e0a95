package store_test

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/store"
	"github.com/spiderpool/spiderpool/tests/harness"
)

// TestRenderedPagesGiveEachProcessorTheDocumentItAsked: of a page a
// browser rendered, a processor gets the rendered DOM, or the document as
// served when it asked for the original, inline or by its token, flagged
// rendered either way; a page fetched plainly has one body, which both
// get. The page record says the page was rendered, with the DOM's length
// and digest beside the document's as served; every chunk goes once both
// processors have stored their batches.
func TestRenderedPagesGiveEachProcessorTheDocumentItAsked(t *testing.T) {
	s := harness.OpenStore(t)
	key, n1, _, claimed := claimPages(t, s, 2, "http://app.test/view/1", "http://app.test/doc/1")
	shell, dom, doc := `<div id="root">Loading…</div>`, `<div id="root"><p class="data">view 1</p></div>`, `<h1>doc</h1>`
	digest := func(b string) string { sum := sha256.Sum256([]byte(b)); return hex.EncodeToString(sum[:]) }
	fetched := func(c store.ClaimedURL, served, body string, rendered bool) store.Outcome {
		o := store.Outcome{ID: c.ID, State: store.Fetched, Attempted: true, Status: 200,
			Page: &store.Page{Status: 200, ContentType: "text/html", ContentLength: int64(len(served)),
				Digest: "sha256:" + digest(served), FetchedAt: time.Now()},
			Body: &store.PageBody{Processors: []string{"views", "shells"}, OriginalFor: []string{"shells"}, URL: c.URL,
				FinalURL: c.URL, Status: 200, Header: http.Header{}, ContentType: "text/html", FetchedAt: time.Now(),
				Body: []byte(body)}}
		if rendered {
			o.Page.Rendered = &store.RenderedDOM{Length: int64(len(body)), Digest: "sha256:" + digest(body)}
			o.Body.Rendered, o.Body.Original = true, []byte(served)
		}
		return o
	}
	view, plain := claimed[0], claimed[1]
	outs := []store.Outcome{fetched(view, shell, dom, true), fetched(plain, doc, doc, false)}
	if res, err := s.Commit(ctx, key, n1, "n1", outs, nil); err != nil || len(res.Accepted) != 2 {
		t.Fatalf("commit accepted %v (%v), want both pages", res.Accepted, err)
	}

	type got struct {
		body     string
		rendered bool
	}
	want := map[string]map[int64]got{
		"views":  {view.ID: {dom, true}, plain.ID: {doc, false}},
		"shells": {view.ID: {shell, true}, plain.ID: {doc, false}},
	}
	for i, name := range []string{"views", "shells"} {
		l := store.Lease{CampaignKey: key, CampaignID: "c", Processor: name, ID: 1<<32 | int64(i+1)}
		for _, inline := range []int64{1 << 10, 0} { // inline, then (asked again) by token
			lease, err := s.LeaseDeliveries(ctx, l, 10, inline, 1<<20, 100)
			if err != nil || len(lease.Pages) != 2 {
				t.Fatalf("%s: leased %d pages (%v), want both", name, len(lease.Pages), err)
			}
			for _, p := range lease.Pages {
				body := string(p.Body)
				if inline == 0 {
					b, _, err := s.Body(ctx, p.Token)
					if err != nil {
						t.Fatalf("%s: body of page %d by its token: %v", name, p.ID, err)
					}
					body = string(b)
				}
				w := want[name][p.ID]
				if (got{body, p.Rendered}) != w || p.SHA256 != digest(w.body) || p.Length != int64(len(w.body)) {
					t.Errorf("%s, inline %d: page %d got %q (rendered %v, sha256 %s, %d bytes), want %+v",
						name, inline, p.ID, body, p.Rendered, p.SHA256, p.Length, w)
				}
			}
		}
		if _, err := s.StoreProcessed(ctx, l, []store.Processed{{ID: view.ID}, {ID: plain.ID}}); err != nil {
			t.Fatalf("store %s's batch: %v", name, err)
		}
	}
	var chunks int
	if err := s.Pool().QueryRow(ctx, `SELECT count(*) FROM body_chunks WHERE campaign = $1`, key).Scan(&chunks); err != nil || chunks != 0 {
		t.Errorf("after both processors: %d chunks kept (%v), want none", chunks, err)
	}

	records := map[string]store.PageRecord{}
	if _, err := s.ExportPages(ctx, key, false, func(r store.PageRecord) error { records[r.URL] = r; return nil }); err != nil {
		t.Fatal(err)
	}
	if r := records[view.URL]; !r.Rendered || r.RenderedLength != int64(len(dom)) || r.RenderedDigest != "sha256:"+digest(dom) ||
		r.Length != int64(len(shell)) || r.Digest != "sha256:"+digest(shell) {
		t.Errorf("the rendered page's record: %+v, want rendered, the DOM's length and digest beside the shell's", r)
	}
	if r := records[plain.URL]; r.Rendered || r.RenderedLength != 0 || r.RenderedDigest != "" || r.Length != int64(len(doc)) {
		t.Errorf("the plain page's record: %+v, want not rendered", r)
	}
}
