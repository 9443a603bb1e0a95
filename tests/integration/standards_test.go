package integration

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nlnwa/gowarc/v3"

	"github.com/spiderpool/spiderpool/archive"
	"github.com/spiderpool/spiderpool/config"
	"github.com/spiderpool/spiderpool/store"
	"github.com/spiderpool/spiderpool/tests/harness"
	"github.com/spiderpool/spiderpool/tests/synthweb"
)

// standardsWeb is one host whose root links to synthweb's standards site.
func standardsWeb(t *testing.T) *synthweb.Web {
	return harness.StartWeb(t, synthweb.Config{
		Hosts: 1, Pages: 1, Seed: 12, PlainLinks: true,
		Custom:     map[int]map[string]http.HandlerFunc{0: synthweb.StandardsSite()},
		ExtraLinks: map[int][]string{0: {synthweb.StdIndex}},
	})
}

// exportByPath is the campaign's export (every URL), keyed by path?query
// of the URL as canonical.
func exportByPath(t *testing.T, s *harness.Stack, id, host string) map[string]store.PageRecord {
	t.Helper()
	out := map[string]store.PageRecord{}
	for url, r := range exportAll(t, s, id) {
		out[strings.TrimPrefix(url, "http://"+host)] = r
	}
	return out
}

// TestRobotsTxtAndQueryOrderAsLinked: a host whose robots.txt has a
// byte-order mark, CRLF line endings, a Crawl-delay of -1 and a rule on a
// query. Its disallowed URLs are never requested, and its pages are
// requested with the query in the order they were linked, not in the
// fingerprint's sorted order. Under v0.1.0 the bad Crawl-delay made the
// whole file allow-all, and "/std/q?b=1&a=2" was requested as
// "/std/q?a=2&b=1", which "Disallow: /std/q?b=" does not cover.
func TestRobotsTxtAndQueryOrderAsLinked(t *testing.T) {
	web := standardsWeb(t)
	host := web.Hosts()[0]
	s := harness.NewStack(t)
	s.StartNode("a", 1)
	id := "standards-robots-" + s.Name
	sum := harness.RunCampaign(t, s, id, loopbackSpec(web), 2*time.Minute)

	requested := map[string]bool{}
	for _, r := range web.Log(host) {
		requested[r.Path] = true
	}
	if !requested["/robots.txt"] || !requested[synthweb.StdIndex] {
		t.Fatalf("robots.txt or the standards index was never requested (log %v); the test proves nothing", requested)
	}
	for p := range requested {
		if strings.HasPrefix(p, "/std/private/") || strings.HasPrefix(p, "/std/q?b=") || strings.HasPrefix(p, "/std/q?a=") {
			t.Errorf("%s was requested; robots.txt disallows it", p)
		}
	}
	if !requested[synthweb.StdQueryOrder] {
		t.Errorf("%s was not requested with its query as linked; requests: %v", synthweb.StdQueryOrder, requested)
	}
	if requested["/std/list?a=1&z=9"] {
		t.Error("/std/list was requested with its query sorted, not as linked")
	}

	pages := exportByPath(t, s, id, host)
	for _, p := range []string{synthweb.StdPrivate, "/std/q?a=2&b=1"} {
		r, ok := pages[p]
		if !ok || r.State != store.Excluded || !strings.HasPrefix(r.Error, "robots.txt disallows") {
			t.Errorf("%s: %+v (known %v); want excluded by robots.txt", p, r, ok)
		}
	}
	if r := pages["/std/list?a=1&z=9"]; r.State != store.Fetched || r.FoundAs != "http://"+host+synthweb.StdQueryOrder {
		t.Errorf("/std/list: state %q found_as %q; want fetched, found as linked", r.State, r.FoundAs)
	}
	t.Logf("%d requests to the host; summary %+v", len(web.Log(host)), sum)
}

// TestPageRobotsAndCharsets: pages whose meta robots or X-Robots-Tag say
// nofollow yield no links; pages in windows-1251 (charset in the header),
// Shift_JIS (in a meta tag), and ISO-8859-1, Shift_JIS and windows-1251
// declared nowhere export their titles as correct UTF-8, and a link in the
// windows-1251 page with a Cyrillic query is requested with the query in
// windows-1251, as browsers send it. Noindex and noarchive, the canonical
// link and <base href> are recorded and honoured. A Location that is
// neither a URL nor UTF-8 is recorded, not left to fail its batch's commit
// for ever.
func TestPageRobotsAndCharsets(t *testing.T) {
	web := standardsWeb(t)
	host := web.Hosts()[0]
	s := harness.NewStack(t)
	warcDir := t.TempDir()
	node := s.StartNodeWith("a", 1, func(c *config.Config) { c.Node.WARCDir = warcDir })
	id := "standards-pages-" + s.Name
	harness.RunCampaign(t, s, id, loopbackSpec(web), 2*time.Minute)
	s.StopNode(node) // closes its WARC files

	requested := map[string]bool{}
	for _, r := range web.Log(host) {
		requested[r.Path] = true
	}
	pages := exportByPath(t, s, id, host)
	for _, p := range []string{synthweb.StdMetaNoFollow, synthweb.StdHeaderNoFollow} {
		r := pages[p]
		if r.State != store.Fetched || !r.NoFollow {
			t.Errorf("%s: state %q nofollow %v; want fetched, nofollow recorded", p, r.State, r.NoFollow)
		}
	}
	for _, p := range []string{synthweb.StdFromMeta, synthweb.StdFromHeader} {
		if _, known := pages[p]; known || requested[p] {
			t.Errorf("%s, linked only from a nofollow page, was taken (requested %v)", p, requested[p])
		}
	}
	for _, c := range []struct{ path, title, charset string }{
		{synthweb.StdWindows1251, synthweb.TitleWindows1251, "windows-1251"},
		{synthweb.StdShiftJIS, synthweb.TitleShiftJIS, "shift_jis"},
		{synthweb.StdLatin1, synthweb.TitleLatin1, "windows-1252"},
		{synthweb.StdSniffedSJIS, synthweb.TitleSniffedSJIS, "shift_jis"},
		{synthweb.StdSniffed1251, synthweb.TitleSniffed1251, "windows-1251"},
	} {
		if r := pages[c.path]; r.Title != c.title || r.Charset != c.charset {
			t.Errorf("%s: title %q charset %q; want %q in %s", c.path, r.Title, r.Charset, c.title, c.charset)
		}
	}
	if !requested[synthweb.StdCyrillicQuery] {
		t.Errorf("the windows-1251 page's link was not requested as %s; requests: %v", synthweb.StdCyrillicQuery, requested)
	}
	if r := pages[synthweb.StdNoArchive]; !r.NoIndex || !r.NoArchive || r.NoFollow {
		t.Errorf("%s: noindex %v noarchive %v nofollow %v; want noindex and noarchive only", synthweb.StdNoArchive, r.NoIndex, r.NoArchive, r.NoFollow)
	}
	if r := pages[synthweb.StdCanonical]; r.Canonical != "http://"+host+synthweb.StdCanonicalOf {
		t.Errorf("%s: canonical %q, want the <link rel=canonical> resolved", synthweb.StdCanonical, r.Canonical)
	}
	if !requested[synthweb.StdBaseLinked] || requested["/std/elsewhere/target.html"] {
		t.Errorf("a link under <base href> resolved wrongly: %s requested %v", synthweb.StdBaseLinked, requested[synthweb.StdBaseLinked])
	}
	if r := pages[synthweb.StdBadRedirect]; r.State != store.Fetched || r.RedirectTo != "invalid: ftp://h/\uFFFD" {
		t.Errorf("%s: state %q redirect_to %q; want fetched, the Location kept as valid UTF-8", synthweb.StdBadRedirect, r.State, r.RedirectTo)
	}
	if !requested[synthweb.StdRelNoFollow] {
		t.Errorf("%s, linked rel=nofollow, was not followed; scope.follow_nofollow defaults to true", synthweb.StdRelNoFollow)
	}

	archived := warcTargets(t, warcDir)
	if archived["http://"+host+synthweb.StdNoArchive] {
		t.Errorf("%s (X-Robots-Tag: noarchive) is in the WARC files", synthweb.StdNoArchive)
	}
	for _, p := range []string{synthweb.StdWindows1251, synthweb.StdQueryOrder} {
		if !archived["http://"+host+p] {
			t.Errorf("%s is not in the WARC files under the URL it was requested as; archived: %v", p, archived)
		}
	}
}

// TestPageRobotsCampaignChoices: a campaign that archives regardless
// (archive.ignore_noarchive) keeps the noarchive page in WARC, and one
// that does not follow rel=nofollow (scope.follow_nofollow false) never
// requests a page linked only that way.
func TestPageRobotsCampaignChoices(t *testing.T) {
	web := standardsWeb(t)
	host := web.Hosts()[0]
	s := harness.NewStack(t)
	warcDir := t.TempDir()
	node := s.StartNodeWith("a", 1, func(c *config.Config) { c.Node.WARCDir = warcDir })
	spec := loopbackSpec(web)
	spec.Archive.IgnoreNoarchive = true
	spec.Scope.FollowNofollow = new(false)
	harness.RunCampaign(t, s, "standards-choices-"+s.Name, spec, 2*time.Minute)
	s.StopNode(node)

	requested := map[string]bool{}
	for _, r := range web.Log(host) {
		requested[r.Path] = true
	}
	if !requested[synthweb.StdIndex] || requested[synthweb.StdRelNoFollow] {
		t.Errorf("index requested %v, %s (linked rel=nofollow only) requested %v; want only the index",
			requested[synthweb.StdIndex], synthweb.StdRelNoFollow, requested[synthweb.StdRelNoFollow])
	}
	if !warcTargets(t, warcDir)["http://"+host+synthweb.StdNoArchive] {
		t.Errorf("%s is not in the WARC files; archive.ignore_noarchive archives it", synthweb.StdNoArchive)
	}
}

// warcTargets is the set of target URIs of the response records in the
// WARC files of dir.
func warcTargets(t *testing.T, dir string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	err := archive.ReadDir(dir, func(file string, wr gowarc.WarcRecord, problems []error) error {
		if len(problems) > 0 {
			t.Errorf("%s: %v", file, problems)
		}
		if wr.Type() == gowarc.Response || wr.Type() == gowarc.Revisit {
			out[wr.WarcHeader().Get(gowarc.WarcTargetURI)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatalf("no response record in %s", dir)
	}
	return out
}
