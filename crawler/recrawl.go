package crawler

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/spiderpool/spiderpool/admission"
	"github.com/spiderpool/spiderpool/crawl"
	"github.com/spiderpool/spiderpool/fetch"
	"github.com/spiderpool/spiderpool/store"
)

// Recurring campaigns (issue 15): a campaign of a series fetches each URL
// conditionally on the validators of the version earlier runs saw, skips
// one not yet due for a revisit, and follows the links of the last
// version of a page that did not change; processors that ask for it keep
// the items of that version (carry).

// histories reads what the campaign's series saw of the claimed URLs, by
// URL ID. Without a series, or without Postgres for it, there is none:
// every URL is then fetched as if new, and its history, merged in
// Postgres (see store.RecordVisits), still comes out right.
func (f *Fetch) histories(ctx context.Context, r *rules, claimed []store.ClaimedURL) map[int64]*store.URLHistory {
	rec := r.spec.Recrawl
	if rec == nil || len(claimed) == 0 {
		return nil
	}
	fps := make([]int64, 0, len(claimed))
	byFP := make(map[int64][]int64, len(claimed))
	for _, c := range claimed {
		u, err := crawl.Canonicalize(c.URL)
		if err != nil {
			continue
		}
		fp := int64(u.Fingerprint())
		fps = append(fps, fp)
		byFP[fp] = append(byFP[fp], c.ID)
	}
	hist, err := f.store.History(ctx, rec.Series, fps)
	if err != nil {
		f.log.Warn("recrawl: history unreadable; fetching unconditionally", "series", rec.Series, "error", err)
		return nil
	}
	out := make(map[int64]*store.URLHistory, len(hist))
	for fp, h := range hist {
		for _, id := range byFP[fp] {
			out[id] = h
		}
	}
	return out
}

// notDue settles a URL its series revisits later: no request, and the
// links of its last version are followed.
func (f *Fetch) notDue(it *item, out outcome) (outcome, bool) {
	h := it.history
	if h == nil || h.Due(time.Now()) {
		return out, false
	}
	out.o.State = store.Excluded
	out.o.Error = fmt.Sprintf("recrawl: not due for a revisit until %s (interval %s, last fetched %s)",
		h.LastFetched.Add(h.Interval).UTC().Format(time.RFC3339), h.Interval, h.LastFetched.UTC().Format(time.RFC3339))
	out.links = f.keptLinks(it, out.self, h.Links)
	out.o.Carry = it.rules.carry(out.self, h)
	return out, true
}

// conditional sets the validators of the version earlier runs saw.
func conditional(it *item, o *fetch.Options) {
	if h := it.history; h != nil && !h.Gone && h.Digest != "" {
		o.IfNoneMatch, o.IfModifiedSince = h.ETag, h.LastModified
	}
}

// notModified settles a 304 to a conditional request: the page is the
// version earlier runs saw, its record keeps that version's digest, and
// its links are followed again. No body was downloaded; the archive gets
// a revisit record (server-not-modified).
func (f *Fetch) notModified(it *item, out outcome, resp *fetch.Response) outcome {
	h := it.history
	out.o.State = store.Fetched
	out.o.Page = &store.Page{
		Status: resp.Status, Digest: h.Digest, Links: len(h.Links), FetchedAt: time.Now(), Duration: resp.Duration,
	}
	out.links = f.keptLinks(it, out.self, h.Links)
	out.o.Carry = it.rules.carry(out.self, h)
	if out.exchange != nil { // archived as a revisit of the version it stands for
		changed := h.LastChanged
		out.exchange.NotModified = &changed
	}
	out.visit = &store.Visit{
		Fingerprint: int64(out.self.Fingerprint()), URL: out.self.String, Kind: store.VisitNotModified,
		Status: resp.Status, At: out.o.Page.FetchedAt,
	}
	return out
}

// carry is what a page settled unchanged keeps of its last version: the
// items that the processors set to "last_version" made of it in the run
// that fetched it, copied when its outcome is committed. Copying the
// items, rather than sending the processor the version again, fetches
// nothing twice and keeps no body past its own run: the processor would
// return the same items of the same bytes. A gone URL has no version.
func (r *rules) carry(self crawl.URL, h *store.URLHistory) *store.Carry {
	if h.Gone || h.VersionRun == 0 || h.VersionRun == r.key || h.Digest == "" {
		return nil
	}
	var names []string
	for i := range r.filters {
		if r.filters[i].KeepsLastVersion(self.String) {
			names = append(names, r.filters[i].Name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	return &store.Carry{From: h.VersionRun, Digest: h.Digest, Processors: names}
}

// keptLinks admits the links of a page's last version, one hop deeper.
func (f *Fetch) keptLinks(it *item, self crawl.URL, links []string) []store.NewURL {
	var out []store.NewURL
	for _, raw := range links {
		u, err := crawl.Canonicalize(raw)
		if err != nil || u.String == self.String {
			continue
		}
		if link, ok := f.admit(it.rules, admission.Candidate{URL: u, Depth: it.url.Depth + 1, Parent: it.url.ID}); ok {
			out = append(out, link)
		}
	}
	return out
}

// visitOf is what a settled fetch adds to its URL's history: a version
// (its validators, digest and links), or its being gone. Other outcomes
// (failures, retries) add nothing.
func visitOf(it *item, out outcome, resp *fetch.Response, links []string) *store.Visit {
	if it.rules.spec.Recrawl == nil || out.visit != nil {
		return out.visit
	}
	v := &store.Visit{
		Fingerprint: int64(out.self.Fingerprint()), URL: out.self.String, Status: resp.Status, At: time.Now(),
		Run: it.rules.key,
	}
	switch {
	case resp.Status == http.StatusNotFound || resp.Status == http.StatusGone:
		v.Kind = store.VisitGone
	case out.o.State == store.Fetched && out.o.Page != nil:
		v.Kind = store.VisitFetched
		v.ETag, v.LastModified = resp.Header.Get("ETag"), resp.Header.Get("Last-Modified")
		v.Digest, v.Links = resp.Digest, links
		if v.Digest == "" {
			v.Digest = "empty"
		}
	default:
		return nil
	}
	return v
}
