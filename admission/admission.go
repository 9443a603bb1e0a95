// Package admission decides what a campaign's frontier takes of the URLs
// found for it, and how. Every path that adds URLs (seeds, a page's links,
// requisites and redirects, sitemaps, links of a page's last version,
// links a processor returns, URLs an operator adds) hands its candidates
// to one Rules, compiled once from the campaign's spec, which gives the
// frontier row to store or the verdict that refuses it.
//
// The rules, in the order Admit applies them: the scope (hosts, depth,
// URL length, path repeats, exclude and include patterns, see crawl.Scope),
// the redirect chain's cap, then the cap on a host's URLs with a query.
// A URL off the scope's hosts or patterns is refused (no row: every
// external link would be stored otherwise); one stopped by a trap rule or
// a cap gets a row recorded excluded, with the reason. Its priority is
// the spec's priority rules' (campaign.Priorities).
package admission

import (
	"fmt"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/crawl"
	"github.com/spiderpool/spiderpool/store"
)

// Source is how a URL was found; it decides which rules hold it.
type Source int

const (
	// Link is a URL found by crawling: a page's link, requisite or
	// redirect target, a sitemap's entry, a processor's link. Every rule
	// holds it.
	Link Source = iota
	// Seed is one of the spec's seeds: admitted whatever the scope, which
	// is drawn around the seeds.
	Seed
	// Added is a URL an operator adds to a running campaign (add_urls):
	// refused by any rule of the scope, recorded ones included, with the
	// verdict as the reason; an operator's choice is no trap, so no cap
	// holds it.
	Added
)

// Candidate is a URL found for a campaign, and where.
type Candidate struct {
	URL  crawl.URL
	From Source
	// Depth is its links from a seed; Redirects, the redirects that led
	// to it since its last link.
	Depth, Redirects int
	// Parent is the frontier row of the page it was found on; 0 for none.
	Parent int64
	// Kind is store.KindPage ("" too) or store.KindRequisite.
	Kind string
	// BasePriority is its priority when no priority rule matches it: 0,
	// or what its sitemap says (campaign.SitemapPriority).
	BasePriority int
	// AddedBy names the add_urls request of an Added URL.
	AddedBy string
}

// A QueryCounter keeps, per campaign and host, the distinct URLs with a
// query admitted: CountQuery reports whether fp is among the first limit
// of shard's, counting it if it is new. Who adds the URLs keeps the
// count (a node for the hosts it owns), so the cap is per keeper: after
// a host changes hands the count starts afresh, which errs towards
// crawling.
type QueryCounter interface {
	CountQuery(campaignKey int64, shard string, fp uint64, limit int) bool
}

// Rules are a campaign's admission rules, compiled. They never change;
// a *Rules is safe for concurrent use.
type Rules struct {
	key                   int64
	scope                 *crawl.Scope
	priorities            campaign.Priorities
	shardBy               crawl.ShardBy
	maxRedirects, queries int
}

// Compile builds the admission rules of campaign key from its spec,
// normalised (campaign.Spec.Normalize); key names the campaign to the
// QueryCounter.
func Compile(key int64, spec campaign.Spec) (*Rules, error) {
	scope, err := spec.CompileScope()
	if err != nil {
		return nil, err
	}
	priorities, err := spec.CompilePriorities()
	if err != nil {
		return nil, err
	}
	return &Rules{
		key: key, scope: scope, priorities: priorities, shardBy: crawl.ShardBy(spec.Scope.ShardBy),
		maxRedirects: spec.Limits.MaxRedirects, queries: spec.Limits.MaxQueryURLsPerHost,
	}, nil
}

// Admit judges c: the frontier row to store for it, and "" (InScope); or,
// when it is to have no row, the verdict of the scope that refuses it.
// A row may record the URL excluded (ExcludedBecause), a trap rule or a
// cap having stopped it. queries counts the Links with a query; it is
// not asked of Seeds and Added URLs, and may then be nil.
func (r *Rules) Admit(c Candidate, queries QueryCounter) (row store.NewURL, refused crawl.Verdict) {
	u := c.URL
	verdict := crawl.InScope
	if c.From != Seed {
		verdict = r.scope.Check(u, c.Depth)
	}
	if verdict != crawl.InScope && (c.From == Added || !verdict.Recorded()) {
		return store.NewURL{}, verdict
	}
	row = store.NewURL{
		Fingerprint: u.Fingerprint(), URL: u.String, FoundAs: u.AsLinked, ShardKey: crawl.ShardKey(u, r.shardBy),
		Depth: c.Depth, Redirects: c.Redirects, ParentID: c.Parent, Kind: c.Kind,
		Priority: int16(r.priorities.Of(u.String, c.BasePriority)), AddedBy: c.AddedBy,
	}
	switch {
	case verdict != crawl.InScope:
		row.ExcludedBecause = string(verdict)
	case c.From != Link:
	case c.Redirects > r.maxRedirects:
		row.ExcludedBecause = fmt.Sprintf("redirect chain longer than limits.max_redirects (%d)", r.maxRedirects)
	case u.HasQuery() && !queries.CountQuery(r.key, row.ShardKey, row.Fingerprint, r.queries):
		row.ExcludedBecause = fmt.Sprintf("host has more than limits.max_query_urls_per_host (%d) URLs with a query", r.queries)
	}
	return row, crawl.InScope
}
