package crawler

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/text/encoding"

	"github.com/spiderpool/spiderpool/admission"
	"github.com/spiderpool/spiderpool/archive"
	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/crawl"
	"github.com/spiderpool/spiderpool/fetch"
	"github.com/spiderpool/spiderpool/store"
)

// check settles what can be settled before a request: a URL that does
// not parse, robots.txt's verdict (the file fetched under the host's turn
// if needed), sitemaps the first time an origin's robots.txt is read for a
// campaign. It returns the outcome and false when the URL is settled
// without a request; ok is false when the URL's batch stopped first (it
// goes back unfetched).
func (f *Fetch) check(ctx context.Context, it *item, h *host) (out outcome, request, ok bool) {
	r, c := it.rules, it.url
	spec := &r.spec
	out = outcome{o: store.Outcome{ID: c.ID}}
	self, err := linked(c)
	if err != nil { // stored canonical URLs always parse
		out.o.State, out.o.Error = store.Failed, err.Error()
		return out, false, true
	}
	out.self = self
	if spec.Politeness.IgnoreRobots {
		if out, skip := f.notDue(it, out); skip {
			return out, false, true
		}
		return out, true, true
	}
	rf, err := f.robots.get(ctx, r, it.batch.key, self.Origin(), h, it.batch.stop, f.archiver())
	switch {
	case err == errStopped:
		return out, false, false
	case err != nil:
		out.o.State, out.o.RetryIn, out.o.Error = store.Pending, 5*time.Second, "robots.txt: "+err.Error()
		return out, false, true
	case rf.refused != "":
		out.o.State, out.o.Attempted, out.o.Error = store.Failed, true, rf.refused
		return out, false, true
	case rf.robots.Unavailable() && !rf.failingSince.IsZero() && time.Since(rf.failingSince) >= spec.Politeness.RobotsTTL.D():
		// RFC 9309 §2.3.1.4 lets a crawler stop waiting for a robots.txt
		// that stays unreachable for a reasonably long period; waiting for
		// ever would keep the campaign from ending. The period is the
		// campaign's robots_ttl, how long it trusts a file it has.
		out.o.State = store.Failed
		out.o.Error = fmt.Sprintf("robots.txt unreachable: %s, for longer than politeness.robots_ttl (%s)",
			statusText(rf.robots.Status()), spec.Politeness.RobotsTTL.D())
		return out, false, true
	case rf.robots.Unavailable():
		// RFC 9309: no robots.txt to be had means no crawling until it
		// is; the host waits, for every campaign, its URLs stay pending,
		// uncharged, until robots_ttl has passed (above).
		wait := max(time.Until(rf.expires), time.Second)
		if err := f.store.PauseHost(ctx, c.ShardKey, wait); err != nil {
			f.log.Warn("pause host", "host", c.ShardKey, "error", err)
		}
		out.o.State, out.o.RetryIn = store.Pending, wait
		out.o.Error = fmt.Sprintf("robots.txt unavailable (%s); host paused", statusText(rf.robots.Status()))
		return out, false, true
	}
	if spec.Sitemaps.Enabled && f.sitemaps.first(it.batch.key, self.Origin()) {
		out.sitemapURLs = f.loadSitemaps(ctx, r, it.batch.key, rf.robots, self, h, it.batch.stop)
	}
	// Judged on what the request will send: a rule on the query must see
	// it in the order it is requested in.
	if !rf.robots.Allowed(self, r.agent) {
		out.o.State, out.o.Error = store.Excluded, "robots.txt disallows it for "+r.agent
		return out, false, true
	}
	if d := rf.robots.CrawlDelay(r.agent); d > 0 {
		h.setCrawlDelay(min(d, spec.Politeness.MaxCrawlDelay.D()))
	}
	if out, skip := f.notDue(it, out); skip {
		return out, false, true
	}
	return out, true, true
}

// request fetches a URL whose turn has come (the caller holds a node slot
// and a host slot, which request gives back) and settles it: its verdict,
// its page record, the links it yields, what its series keeps of it and
// what the archive does.
func (f *Fetch) request(ctx context.Context, it *item, h *host, out outcome) outcome {
	o := f.options(it, h)
	resp := f.send(ctx, it, h, out.self, o)
	out = answered(out, &resp)
	if resp.Status == http.StatusNotModified && (o.IfNoneMatch != "" || o.IfModifiedSince != "") {
		out = f.notModified(it, out, &resp)
	} else {
		var links []string
		out, links = f.judge(it, out, &resp)
		// A page of a recurring series adds what it was to its history:
		// its validators, digest and links, or that it is gone.
		out.visit = visitOf(it, out, &resp, links)
	}
	out = withoutNoarchive(it, out, &resp)
	if out.exchange != nil {
		f.archiveResources(ctx, it.rules, &resp)
		f.archiveScreenshot(it.rules, out.exchange, &resp)
	}
	return out
}

// archiveResources archives what a rendered page loaded beyond itself
// (scripts, fetch() data, images), each exchange as it crossed the wire,
// so the page replays as the browser saw it.
func (f *Fetch) archiveResources(ctx context.Context, r *rules, resp *fetch.Response) {
	if resp.Rendered == nil || f.archive == nil {
		return
	}
	for _, res := range resp.Rendered.Resources {
		f.archiveNow(context.WithoutCancel(ctx), r, res.URL, &fetch.Response{Status: res.Status, Sent: resp.Sent, Wire: res.Wire, Err: res.Err})
	}
}

// options are a page request's: the campaign's timeouts and caps, the
// body kept for the page's links and processors, the exchange captured
// when the node archives, and the validators of the version earlier runs
// of its series saw.
func (f *Fetch) options(it *item, h *host) fetch.Options {
	r := it.rules
	spec := &r.spec
	o := fetch.Options{
		UserAgent:       spec.Politeness.UserAgent,
		ConnectTimeout:  spec.Timeouts.Connect.D(),
		RequestTimeout:  spec.Timeouts.Request.D(),
		IdleTimeout:     spec.Timeouts.Idle.D(),
		MaxBodyBytes:    spec.Limits.MaxBodyBytes,
		KeepBody:        true,
		KeepAnyType:     r.anyType,
		KeepStylesheets: spec.Scope.Requisites,
		Capture:         f.archive != nil, // the archive keeps the bytes as exchanged
		Reached:         h.reached,
	}
	conditional(it, &o)
	if it.url.Kind != store.KindRequisite && r.render.renders(it.url.ShardKey, it.url.URL) {
		o.Render = r.render.options(r.key, f.renderCheck(r))
	}
	return o
}

// send requests self, gives back the node and host slots once answered,
// and lets the host learn from the answer (its pace, its errors).
func (f *Fetch) send(ctx context.Context, it *item, h *host, self crawl.URL, o fetch.Options) fetch.Response {
	requestEnded := f.metrics.RequestStarted()
	// Once sent, a request runs to its end and its result is committed,
	// even if its batch is cancelled: dropping it would make the page be
	// fetched again.
	resp := f.pages.Get(context.WithoutCancel(ctx), self.Linked(), o)
	requestEnded()
	f.slots.give(it.batch.key)
	f.metrics.Response(resp.Status, resp.Length, resp.Duration)
	h.observe(ctx, &resp, it.rules.spec.Politeness.MaxRetryAfter.D())
	h.done()
	return resp
}

// answered records that the URL was asked for, and what came back: its
// status and size, whether the node's own network failed, the exchange to
// archive.
func answered(out outcome, resp *fetch.Response) outcome {
	// Every answer is archived, failures (404, 503) and pages cut at the
	// cap too: the archive is of what was exchanged (but see
	// withoutNoarchive).
	out.exchange = exchangeOf(out.self.Linked(), resp)
	out.o.Attempted, out.o.Status, out.bytes = true, resp.Status, resp.Length
	out.requestMs = resp.Duration.Milliseconds()
	// Only failures with no answer at all speak of the node (its network,
	// its load); a 5xx speaks of the host, whichever node asked.
	out.transportError = resp.Status == 0 && resp.Err != nil && !errors.Is(resp.Err, fetch.ErrBlocked)
	return out
}

// withoutNoarchive keeps out of the archive a page that asks not to be
// in it (noarchive, in its X-Robots-Tag header or its robots meta), unless
// the campaign archives regardless. A page settled without a record
// has only its header to say so.
func withoutNoarchive(it *item, out outcome, resp *fetch.Response) outcome {
	robots := crawl.RobotsTag(resp.Header.Values("X-Robots-Tag"), it.rules.agent)
	if out.o.Page != nil {
		robots = out.o.Page.Robots
	}
	if robots.NoArchive && !it.rules.spec.Archive.IgnoreNoarchive {
		out.exchange = nil
	}
	return out
}

// judge gives an answer its verdict: an error is retried or fails, a
// body past the cap fails, anything else is a page fetched. links are the
// URLs a fetched page links to, for its series' history.
func (f *Fetch) judge(it *item, out outcome, resp *fetch.Response) (_ outcome, links []string) {
	spec := &it.rules.spec
	switch fetch.Classify(resp, spec.Retry.NonRetryableStatuses) {
	case fetch.Transient:
		return retryOrFail(it, out, resp), nil
	case fetch.Final:
		out.o.State, out.o.Error = store.Failed, fetch.Describe(resp)
		return out, nil
	}
	if resp.Truncated {
		// A body past the cap is a trap (or not a page we can use): a
		// record of failure beats a page cut off at a random byte.
		out.o.State = store.Failed
		out.o.Error = fmt.Sprintf("body larger than limits.max_body_bytes (%d bytes)", spec.Limits.MaxBodyBytes)
		return out, nil
	}
	return f.fetched(it, out, resp)
}

// retryOrFail settles a transient error: pending again after a back-off
// (or the Retry-After the host asked for, capped, if longer) until
// retry.max_attempts are spent, then failed.
func retryOrFail(it *item, out outcome, resp *fetch.Response) outcome {
	spec := &it.rules.spec
	attempt := it.url.Attempts + 1
	out.o.Error = fetch.Describe(resp)
	if attempt < spec.Retry.MaxAttempts {
		out.o.State = store.Pending
		out.o.RetryIn = max(backoff(spec.Retry, attempt), min(resp.RetryAfter, spec.Politeness.MaxRetryAfter.D()))
		return out
	}
	out.o.State = store.Failed
	out.o.Error = fmt.Sprintf("%s (after %d attempts)", out.o.Error, attempt)
	return out
}

// fetched records a page: its record, its body for the processors that
// want it, and what it yields: a redirect its target, a stylesheet its
// requisites, an HTML page its requisites and links. A requisite's links
// are not followed.
func (f *Fetch) fetched(it *item, out outcome, resp *fetch.Response) (_ outcome, links []string) {
	r, c, self := it.rules, it.url, out.self
	out.o.State = store.Fetched
	page := &store.Page{
		Status: resp.Status, ContentType: resp.ContentType, ContentLength: resp.Length,
		Digest: resp.Digest, FetchedAt: time.Now(), Duration: resp.Duration,
	}
	out.o.Page = page
	if resp.Rendered != nil {
		page.Rendered = renderedDOM(resp.Body)
	}
	out.o.Body = r.forProcessors(&c, self, resp, page.FetchedAt)
	page.Robots = crawl.RobotsTag(resp.Header.Values("X-Robots-Tag"), r.agent)
	if resp.Status >= 300 && resp.Status < 400 && resp.Location != "" {
		return f.redirected(it, out, resp)
	}
	page.Canonical = linkHeaderCanonical(self, resp.Header.Values("Link"))
	switch {
	case r.spec.Scope.Requisites && resp.IsStylesheet():
		// A stylesheet's url()s and @imports: fonts, backgrounds, more CSS.
		seen := map[uint64]bool{self.Fingerprint(): true}
		out.links = f.requisites(r, c, self, crawl.CSSURLs(resp.Body, r.spec.Limits.MaxLinksPerPage), nil, seen, out.links)
		return out, nil
	case c.Kind == store.KindRequisite || !resp.IsHTML() || len(resp.Body) == 0:
		return out, nil
	}
	return f.htmlPage(it, out, resp)
}

// renderedDOM is what a rendered page's record keeps of its DOM: the
// record's length and digest are the document's as served, which the
// archive holds.
func renderedDOM(dom []byte) *store.RenderedDOM {
	sum := sha256.Sum256(dom)
	return &store.RenderedDOM{Length: int64(len(dom)), Digest: "sha256:" + hex.EncodeToString(sum[:])}
}

// redirected records where a redirect leads and admits its target. A
// redirect is not a link hop: same depth, one more redirect; a
// requisite's target is a requisite.
func (f *Fetch) redirected(it *item, out outcome, resp *fetch.Response) (_ outcome, links []string) {
	c, page := it.url, out.o.Page
	target, err := crawl.Resolve(out.self, resp.Location)
	if err != nil {
		page.RedirectTo = "invalid: " + storable(resp.Location)
		return out, nil
	}
	page.RedirectTo = target.String
	redirect := admission.Candidate{URL: target, Depth: c.Depth, Redirects: c.Redirects + 1, Parent: c.ID, Kind: c.Kind}
	if link, ok := f.admit(it.rules, redirect); ok {
		out.links = append(out.links, link)
	}
	return out, []string{target.Linked()}
}

// htmlPage reads an HTML page: its record (title, charset, canonical,
// robots meta), the requisites it needs and, unless it says nofollow,
// its links.
func (f *Fetch) htmlPage(it *item, out outcome, resp *fetch.Response) (_ outcome, links []string) {
	r, self, page := it.rules, out.self, out.o.Page
	spec := &r.spec
	html := crawl.DecodeHTML(resp.Body, resp.Header.Get("Content-Type"))
	doc := crawl.Extract(html.UTF8, crawl.ExtractOptions{MaxLinks: spec.Limits.MaxLinksPerPage, Requisites: spec.Scope.Requisites})
	page.Title, page.Links, page.Charset = doc.Title, len(doc.Links), html.Charset
	page.Robots = page.Robots.Merge(doc.For(r.agent))
	if doc.Truncated {
		out.o.Error = fmt.Sprintf("kept the first %d links (limits.max_links_per_page)", len(doc.Links))
	}
	// <base href> is the standard's base URL; Content-Location is not
	// (HTML ignores it, as browsers do), so it plays no part.
	base := self
	if doc.Base != "" {
		if b, err := crawl.Resolve(self, crawl.EncodeQuery(doc.Base, html.Encoding)); err == nil {
			base = b
		}
	}
	if doc.Canonical != "" {
		if u, err := crawl.Resolve(base, crawl.EncodeQuery(doc.Canonical, html.Encoding)); err == nil {
			page.Canonical = u.Linked()
		}
	}
	seen := make(map[uint64]bool, len(doc.Links)+len(doc.Requisites))
	seen[self.Fingerprint()] = true
	// What the page needs to render is no link: a nofollow page has it
	// fetched too.
	out.links = f.requisites(r, it.url, base, doc.Requisites, html.Encoding, seen, out.links)
	if page.Robots.NoFollow {
		return out, nil
	}
	return f.follow(it, out, base, &doc, html.Encoding, seen)
}

// follow admits a page's links, resolved against base, one hop deeper,
// each once (seen holds the fingerprints the page yielded already);
// rel="nofollow" ones only when the scope follows them. links are every
// link followed, admitted or not.
func (f *Fetch) follow(it *item, out outcome, base crawl.URL, doc *crawl.Page, enc encoding.Encoding, seen map[uint64]bool) (_ outcome, links []string) {
	c := it.url
	followNofollow := it.rules.spec.Scope.FollowsNofollow()
	for i, href := range doc.Links {
		if doc.RelNoFollow[i] && !followNofollow {
			continue
		}
		u, err := crawl.Resolve(base, crawl.EncodeQuery(href, enc))
		if err != nil {
			continue
		}
		fp := u.Fingerprint()
		if seen[fp] || u.String == out.self.String {
			continue
		}
		seen[fp] = true
		links = append(links, u.Linked())
		if link, ok := f.admit(it.rules, admission.Candidate{URL: u, Depth: c.Depth + 1, Parent: c.ID}); ok {
			out.links = append(out.links, link)
		}
	}
	return out, links
}

// exchangeOf is what a response makes for the archive: nil when its bytes
// were not captured, or the answer broke off (it is retried).
func exchangeOf(url string, resp *fetch.Response) *archive.Exchange {
	w := resp.Wire
	if w == nil || resp.Err != nil || resp.Status == 0 {
		return nil
	}
	return &archive.Exchange{
		URL: url, Date: resp.Sent, Request: w.Request, Response: w.Response,
		RemoteIP: w.RemoteIP, Truncated: w.Truncated,
	}
}

// archiveExchanges writes a campaign's exchanges to the node's WARC files,
// the cluster's payload index deciding which payloads are revisits. It
// returns an error per exchange, nil when written.
func (f *Fetch) archiveExchanges(ctx context.Context, r *rules, exs []archive.Exchange) []error {
	c := archive.Campaign{Key: r.key, ID: r.id, Spec: r.spec}
	errs, indexErr := f.archive.Write(ctx, c, f.store, exs)
	if indexErr != nil {
		f.log.Warn("payload index unavailable: payloads archived in full", "campaign", r.id, "error", indexErr)
	}
	return errs
}

// archiver is archiveNow, or nil when the node archives nothing.
func (f *Fetch) archiver() archiveFunc {
	if f.archive == nil {
		return nil
	}
	return f.archiveNow
}

// archiveNow archives an exchange made outside a page's own fetch
// (robots.txt, sitemaps) as it happens; nothing without an archive.
func (f *Fetch) archiveNow(ctx context.Context, r *rules, url string, resp *fetch.Response) {
	ex := exchangeOf(url, resp)
	if f.archive == nil || ex == nil {
		return
	}
	if err := f.archiveExchanges(ctx, r, []archive.Exchange{*ex})[0]; err != nil {
		f.log.Warn("archive", "campaign", r.id, "url", url, "error", err)
	}
}

// linked is a claimed URL in the form to request: as it was linked (its
// query in the link's own order) when the frontier knows that form and it
// is the same page, else the canonical form. Rows stored before the linked
// form was kept hold the raw href in found_as, often relative: those parse
// to another page, or not at all, and the canonical form is requested.
func linked(c store.ClaimedURL) (crawl.URL, error) {
	self, err := crawl.Canonicalize(c.URL)
	if err != nil || c.FoundAs == "" {
		return self, err
	}
	if as, err := crawl.Canonicalize(c.FoundAs); err == nil && as.String == self.String {
		return as, nil
	}
	return self, nil
}

// requisites admits what a page (or a stylesheet) at c needs to render,
// resolved against base: in scope as the page is, at its depth (an embed is
// no link hop), as frontier rows of kind requisite. seen holds the
// fingerprints the page has yielded already.
func (f *Fetch) requisites(r *rules, c store.ClaimedURL, base crawl.URL, raws []string, enc encoding.Encoding, seen map[uint64]bool, links []store.NewURL) []store.NewURL {
	for _, raw := range raws {
		u, err := crawl.Resolve(base, crawl.EncodeQuery(raw, enc))
		if err != nil {
			continue
		}
		fp := u.Fingerprint()
		if seen[fp] {
			continue
		}
		seen[fp] = true
		if link, ok := f.admit(r, admission.Candidate{URL: u, Depth: c.Depth, Parent: c.ID, Kind: store.KindRequisite}); ok {
			links = append(links, link)
		}
	}
	return links
}

// linkHeaderCanonical is the target of a Link header's rel="canonical"
// (RFC 6596), resolved against the URL requested, or "".
func linkHeaderCanonical(self crawl.URL, values []string) string {
	for _, v := range values {
		for _, link := range strings.Split(v, ",") {
			target, params, ok := strings.Cut(link, ";")
			target = strings.TrimSpace(target)
			if !ok || !strings.HasPrefix(target, "<") || !strings.HasSuffix(target, ">") {
				continue
			}
			for _, p := range strings.Split(params, ";") {
				k, v, _ := strings.Cut(p, "=")
				if !strings.EqualFold(strings.TrimSpace(k), "rel") {
					continue
				}
				if !slices.Contains(strings.Fields(strings.ToLower(strings.Trim(strings.TrimSpace(v), `"`))), "canonical") {
					continue
				}
				if u, err := crawl.Resolve(self, target[1:len(target)-1]); err == nil {
					return u.Linked()
				}
			}
		}
	}
	return ""
}

// storable makes text from the web fit a Postgres text column: a header
// in a legacy charset (or a NUL) would fail the commit of its whole batch,
// every time it is retried.
func storable(s string) string {
	return strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "\uFFFD")
}

func statusText(status int) string {
	if status == 0 {
		return "no answer"
	}
	return fmt.Sprintf("HTTP %d", status)
}

// backoff is the wait before attempt+1: initial × coefficient^(attempt-1),
// capped.
func backoff(p campaign.Retry, attempt int) time.Duration {
	d := float64(p.InitialInterval.D()) * math.Pow(p.BackoffCoefficient, float64(attempt-1))
	return time.Duration(math.Min(d, float64(p.MaxInterval.D())))
}

// admit judges a URL the node found for r's campaign under its admission
// rules, the node's query counts capping its hosts: the frontier row, or
// false when it gets none.
func (f *Fetch) admit(r *rules, c admission.Candidate) (store.NewURL, bool) {
	link, refused := r.admission.Admit(c, &f.queries)
	return link, refused == crawl.InScope
}

// campaignHost is one campaign's view of one host.
type campaignHost struct {
	campaign int64
	shard    string
}

// firsts remembers which (campaign, origin) pairs this node has seen, so
// that an origin's sitemaps are read once per campaign.
type firsts struct {
	mu   sync.Mutex
	seen map[campaignHost]bool
}

// first reports whether this is the first time for the pair.
func (s *firsts) first(campaignKey int64, origin string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := campaignHost{campaignKey, origin}
	if s.seen[k] {
		return false
	}
	if s.seen == nil || len(s.seen) > 100_000 {
		s.seen = map[campaignHost]bool{}
	}
	s.seen[k] = true
	return true
}

// rules is a campaign's compiled spec, cached per node.
type rules struct {
	key    int64
	id     string
	spec   campaign.Spec
	agent  string // robots.txt product token
	loaded time.Time
	// admission judges the URLs its pages yield.
	admission *admission.Rules
	// filters are the campaign's processors' page filters; anyType, that
	// some want bodies that are not HTML.
	filters []campaign.PageFilter
	anyType bool
	// render says which of its pages a browser renders (spec.render);
	// nil: none.
	render *renderRules
}

type rulesCache struct {
	store *store.Store
	mu    sync.Mutex
	byKey map[int64]*rules
}

// get returns the campaign's rules, reloading them after a minute so a
// campaign restarted with a new spec is picked up.
func (c *rulesCache) get(ctx context.Context, key int64) (*rules, error) {
	c.mu.Lock()
	r, ok := c.byKey[key]
	c.mu.Unlock()
	if ok && time.Since(r.loaded) < time.Minute {
		return r, nil
	}
	spec, err := c.store.CampaignSpec(ctx, key)
	if err != nil {
		return nil, err
	}
	id, err := c.store.CampaignID(ctx, key)
	if err != nil {
		return nil, err
	}
	admit, err := admission.Compile(key, spec)
	if err != nil {
		return nil, err
	}
	filters, err := spec.CompileFilters()
	if err != nil {
		return nil, err
	}
	render, err := compileRender(spec.Render)
	if err != nil {
		return nil, err
	}
	r = &rules{
		key: key, id: id, spec: spec, agent: crawl.AgentToken(spec.Politeness.UserAgent), loaded: time.Now(),
		admission: admit, filters: filters, anyType: spec.WantsAnyType(), render: render,
	}
	c.mu.Lock()
	c.byKey[key] = r
	c.mu.Unlock()
	return r, nil
}
