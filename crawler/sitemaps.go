package crawler

import (
	"context"

	"github.com/spiderpool/spiderpool/admission"
	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/crawl"
	"github.com/spiderpool/spiderpool/fetch"
	"github.com/spiderpool/spiderpool/store"
)

// maxSitemapDocs caps the sitemap documents (index files included) read
// for one origin.
const maxSitemapDocs = 50

// loadSitemaps reads the sitemaps an origin's robots.txt lists, following
// index files, and adds their in-scope URLs as seeds. Each document is a
// request to its host like any other: under its turn, body capped, gzip
// bombs stopped at the cap. It returns how many URLs were new.
func (f *Fetch) loadSitemaps(ctx context.Context, r *rules, campaignKey int64, robots *crawl.Robots, origin crawl.URL, h *host, stop <-chan struct{}) int {
	queue := robots.Sitemaps()
	budget := r.spec.Sitemaps.MaxURLsPerHost
	added := 0
	for docs := 0; len(queue) > 0 && docs < maxSitemapDocs && budget > 0; docs++ {
		loc, err := crawl.Resolve(origin, queue[0])
		queue = queue[1:]
		if err != nil {
			continue
		}
		if !h.turn(ctx, stop, func() bool { return f.slots.take(campaignKey, stop) }, func() { f.slots.give(campaignKey) }) {
			return added
		}
		resp := f.fetcher.Get(ctx, loc.String, fetch.Options{
			UserAgent: r.spec.Politeness.UserAgent, ConnectTimeout: r.spec.Timeouts.Connect.D(),
			RequestTimeout: r.spec.Timeouts.Request.D(), IdleTimeout: r.spec.Timeouts.Idle.D(),
			MaxBodyBytes: r.spec.Limits.MaxBodyBytes, KeepBody: true, KeepAnyType: true, Capture: f.archive != nil,
			Reached: h.reached,
		})
		f.slots.give(campaignKey)
		h.observe(ctx, &resp, r.spec.Politeness.MaxRetryAfter.D())
		h.done()
		f.archiveNow(ctx, r, loc.String, &resp)
		if resp.Err != nil || resp.Status != 200 {
			f.log.Info("sitemap not read", "sitemap", loc.String, "status", resp.Status, "error", resp.Err)
			continue
		}
		sm, err := crawl.ParseSitemap(resp.Body, budget, r.spec.Limits.MaxBodyBytes)
		if err != nil {
			f.log.Info("sitemap not parsed", "sitemap", loc.String, "error", err)
			continue
		}
		queue = append(queue, sm.Sitemaps...)
		var urls []store.NewURL
		var mods []store.SitemapLastMod
		for i, raw := range sm.URLs {
			u, err := crawl.Resolve(loc, raw)
			if err != nil {
				continue
			}
			// The sitemap ranks its URLs; a rule of the spec may rank higher.
			entry := admission.Candidate{URL: u, BasePriority: campaign.SitemapPriority(sm.Priorities[i])}
			if link, ok := f.admit(r, entry); ok {
				urls = append(urls, link)
				if !sm.LastMods[i].IsZero() {
					mods = append(mods, store.SitemapLastMod{Fingerprint: int64(u.Fingerprint()), URL: u.String, LastMod: sm.LastMods[i]})
				}
			}
		}
		// A recurring campaign revisits at once a URL the sitemap says
		// changed since it was last fetched (noted before the URL is queued).
		if rec := r.spec.Recrawl; rec != nil {
			if err := f.store.NoteSitemapLastMods(ctx, rec.Series, mods); err != nil {
				f.log.Warn("recrawl: sitemap lastmods not noted; their URLs wait for their intervals", "sitemap", loc.String, "error", err)
			}
		}
		budget -= len(sm.URLs)
		n, err := f.store.InsertURLs(ctx, campaignKey, urls)
		if err != nil {
			f.log.Warn("add sitemap URLs", "sitemap", loc.String, "error", err)
			continue
		}
		added += n
	}
	return added
}
