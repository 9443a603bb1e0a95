package admission_test

import (
	"strings"
	"testing"

	"github.com/spiderpool/spiderpool/admission"
	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/crawl"
)

func compile(t *testing.T, spec campaign.Spec) *admission.Rules {
	t.Helper()
	spec, err := spec.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	r, err := admission.Compile(1, spec)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func url(t *testing.T, raw string) crawl.URL {
	t.Helper()
	u, err := crawl.Canonicalize(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestLinksAreHeldToEveryRule: a link off the scope's hosts or patterns
// gets no row; one stopped by a trap rule, the redirect cap or the query
// cap gets a row recorded excluded, saying which.
func TestLinksAreHeldToEveryRule(t *testing.T) {
	spec := campaign.Spec{Seeds: []string{"http://a.test/"}, Scope: campaign.Scope{Exclude: []string{"/private/"}}}
	depth := 2
	spec.Limits.MaxDepth = &depth
	spec.Limits.MaxRedirects = 1
	spec.Limits.MaxQueryURLsPerHost = 1
	r := compile(t, spec)
	var queries admission.QueryCounts
	for _, c := range []struct {
		name             string
		raw              string
		depth, redirects int
		refused          crawl.Verdict
		excludedBecause  string // a substring; "" for a row queued
	}{
		{"in scope", "http://a.test/page", 1, 0, "", ""},
		{"another host", "http://b.test/", 1, 0, crawl.OutOfScopeHost, ""},
		{"an exclude pattern", "http://a.test/private/x", 1, 0, crawl.Excluded, ""},
		{"too deep", "http://a.test/deep", 3, 0, "", string(crawl.TooDeep)},
		{"a path that repeats", "http://a.test/a/a/a/a/a", 1, 0, "", string(crawl.RepeatedPath)},
		{"redirects within the cap", "http://a.test/moved", 1, 1, "", ""},
		{"one redirect too many", "http://a.test/moved-again", 1, 2, "", "limits.max_redirects (1)"},
		{"the host's first query", "http://a.test/?q=1", 1, 0, "", ""},
		{"the same query again", "http://a.test/?q=1", 2, 0, "", ""},
		{"a query past the cap", "http://a.test/?q=2", 1, 0, "", "limits.max_query_urls_per_host (1)"},
		{"another host's query", "http://sub.a.test/?q=2", 1, 0, crawl.OutOfScopeHost, ""},
	} {
		row, refused := r.Admit(admission.Candidate{URL: url(t, c.raw), Depth: c.depth, Redirects: c.redirects, Parent: 7}, &queries)
		switch {
		case refused != c.refused:
			t.Errorf("%s: refused %q, want %q", c.name, refused, c.refused)
		case refused != "":
		case row.URL != url(t, c.raw).String || row.Depth != c.depth || row.Redirects != c.redirects || row.ParentID != 7 || row.ShardKey != "a.test":
			t.Errorf("%s: row %+v, want %s at depth %d, %d redirects, parent 7, shard a.test", c.name, row, c.raw, c.depth, c.redirects)
		case c.excludedBecause == "" && row.ExcludedBecause != "":
			t.Errorf("%s: excluded because %q, want it queued", c.name, row.ExcludedBecause)
		case !strings.Contains(row.ExcludedBecause, c.excludedBecause):
			t.Errorf("%s: excluded because %q, want it to say %q", c.name, row.ExcludedBecause, c.excludedBecause)
		}
	}
}

// TestSeedsAndAddedURLs: a seed is admitted whatever the scope; an added
// URL is refused by any rule of the scope, a trap rule's too, and neither
// is held to the query cap.
func TestSeedsAndAddedURLs(t *testing.T) {
	spec := campaign.Spec{Seeds: []string{"http://a.test/?start", "http://a.test/?again"}, Scope: campaign.Scope{Include: []string{"/blog/"}}}
	spec.Limits.MaxQueryURLsPerHost = 1
	spec.Limits.MaxURLLength = 40
	r := compile(t, spec)
	for _, raw := range spec.Seeds {
		if row, refused := r.Admit(admission.Candidate{URL: url(t, raw), From: admission.Seed}, nil); refused != "" || row.ExcludedBecause != "" {
			t.Errorf("seed %s: refused %q, excluded because %q; want it queued", raw, refused, row.ExcludedBecause)
		}
	}
	for _, c := range []struct {
		raw     string
		refused crawl.Verdict
	}{
		{"http://a.test/blog/?p=1", ""},
		{"http://a.test/blog/?p=2", ""},
		{"http://a.test/about", crawl.NotIncluded},
		{"http://a.test/blog/" + strings.Repeat("x", 40), crawl.TooLong},
	} {
		row, refused := r.Admit(admission.Candidate{URL: url(t, c.raw), From: admission.Added, AddedBy: "run/update"}, nil)
		if refused != c.refused {
			t.Errorf("added %s: refused %q, want %q", c.raw, refused, c.refused)
		}
		if refused == "" && (row.ExcludedBecause != "" || row.AddedBy != "run/update") {
			t.Errorf("added %s: row %+v, want it queued, added by run/update", c.raw, row)
		}
	}
}

// TestPriorityIsTheRulesOrTheBase: a URL's priority is the highest of the
// priority rules it matches, or its base (a sitemap's) when it matches
// none.
func TestPriorityIsTheRulesOrTheBase(t *testing.T) {
	r := compile(t, campaign.Spec{Seeds: []string{"http://a.test/"}, Scope: campaign.Scope{Priorities: []campaign.PriorityRule{{Pattern: "/news/", Priority: 5}}}})
	for _, c := range []struct {
		raw        string
		base, want int
	}{
		{"http://a.test/news/1", 0, 5},
		{"http://a.test/news/2", 8, 5},
		{"http://a.test/other", -4, -4},
		{"http://a.test/other", 0, 0},
	} {
		row, _ := r.Admit(admission.Candidate{URL: url(t, c.raw), BasePriority: c.base}, &admission.QueryCounts{})
		if int(row.Priority) != c.want {
			t.Errorf("%s, base %d: priority %d, want %d", c.raw, c.base, row.Priority, c.want)
		}
	}
}

// TestShardByDomain: a spec sharding by domain keys a subdomain's URLs by
// their registered domain.
func TestShardByDomain(t *testing.T) {
	r := compile(t, campaign.Spec{Seeds: []string{"http://www.example.com/"}, Scope: campaign.Scope{AllowedDomains: []string{"example.com"}, ShardBy: "domain"}})
	row, refused := r.Admit(admission.Candidate{URL: url(t, "http://img.example.com/a.png"), Kind: "requisite"}, &admission.QueryCounts{})
	if refused != "" || row.ShardKey != "example.com" || row.Kind != "requisite" {
		t.Errorf("row %+v (refused %q), want shard example.com, kind requisite", row, refused)
	}
}
