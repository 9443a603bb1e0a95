package crawl

import (
	"bytes"
	"compress/gzip"
	"slices"
	"strings"
	"testing"
	"time"
)

func mustURL(t *testing.T, s string) URL {
	t.Helper()
	u, err := Canonicalize(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestRobotsRules(t *testing.T) {
	r := ParseRobots(200, []byte(`# comment
Disallow: /before-any-agent
User-agent: *
Disallow: /private/
Allow: /private/ok
Crawl-delay: soon

User-agent: spiderpool
Disallow: /no-spiders
Disallow: /*.pdf$
Allow: /no-spiders/but-this
Crawl-delay: 1.5
Sitemap: http://h/sitemap.xml
`))
	for _, tc := range []struct {
		url, agent string
		want       bool
	}{
		{"http://h/private/x", "otherbot", false},
		{"http://h/private/ok/y", "otherbot", true},
		{"http://h/no-spiders/a", "spiderpool", false},
		{"http://h/no-spiders/but-this", "spiderpool", true},
		{"http://h/doc.pdf", "spiderpool", false},
		{"http://h/doc.pdf?x=1", "spiderpool", true},
		{"http://h/private/x", "spiderpool", true}, // its own group replaces *
		{"http://h/before-any-agent", "otherbot", true},
	} {
		if got := r.Allowed(mustURL(t, tc.url), tc.agent); got != tc.want {
			t.Errorf("Allowed(%s, %s) = %v, want %v", tc.url, tc.agent, got, tc.want)
		}
	}
	if d := r.CrawlDelay("spiderpool"); d != 1500*time.Millisecond {
		t.Errorf("crawl delay %v", d)
	}
	if d := r.CrawlDelay("otherbot"); d != 0 {
		t.Errorf("unparseable crawl delay became %v", d)
	}
	if s := r.Sitemaps(); len(s) != 1 || s[0] != "http://h/sitemap.xml" {
		t.Errorf("sitemaps %v", s)
	}
}

func TestRobotsStatusRules(t *testing.T) {
	u := mustURL(t, "http://h/anything")
	if r := ParseRobots(404, nil); !r.Allowed(u, "spiderpool") || r.Unavailable() {
		t.Error("4xx must allow all")
	}
	for _, status := range []int{500, 503, 0, 302} {
		if r := ParseRobots(status, []byte("User-agent: *\nAllow: /")); r.Allowed(u, "spiderpool") || !r.Unavailable() {
			t.Errorf("status %d must disallow all until fetched again", status)
		}
	}
	if r := ParseRobots(200, nil); !r.Allowed(u, "spiderpool") {
		t.Error("an empty file allows all")
	}
}

func TestAgentToken(t *testing.T) {
	for in, want := range map[string]string{
		"spiderpool/0.1 (+https://x)": "spiderpool", "MyBot": "mybot", "Crawler (x)": "crawler", "": "*",
	} {
		if got := AgentToken(in); got != want {
			t.Errorf("AgentToken(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseSitemap(t *testing.T) {
	urlset := `<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
<url><loc> http://h/a </loc><lastmod>2024-01-01</lastmod></url><url><loc>http://h/b</loc></url></urlset>`
	sm, err := ParseSitemap([]byte(urlset), 100, 1<<20)
	if err != nil || strings.Join(sm.URLs, ",") != "http://h/a,http://h/b" || len(sm.Sitemaps) != 0 {
		t.Fatalf("urlset: %+v %v", sm, err)
	}
	index := `<sitemapindex><sitemap><loc>http://h/s1.xml.gz</loc></sitemap><sitemap><loc>http://h/s2.xml</loc></sitemap></sitemapindex>`
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(index))
	zw.Close()
	sm, err = ParseSitemap(gz.Bytes(), 100, 1<<20)
	if err != nil || len(sm.Sitemaps) != 2 || len(sm.URLs) != 0 {
		t.Fatalf("gzipped index: %+v %v", sm, err)
	}
	sm, _ = ParseSitemap([]byte(urlset), 1, 1<<20)
	if len(sm.URLs) != 1 || !sm.Truncated {
		t.Fatalf("capped: %+v", sm)
	}
	// A gzip bomb stops at the byte cap.
	var bomb bytes.Buffer
	zw = gzip.NewWriter(&bomb)
	zw.Write([]byte("<urlset>"))
	zw.Write(bytes.Repeat([]byte(" "), 10<<20))
	zw.Close()
	if sm, err = ParseSitemap(bomb.Bytes(), 100, 1<<20); err != nil || !sm.Truncated {
		t.Fatalf("bomb: %+v %v", sm, err)
	}
}

// TestRobotsReadsPastBadLines is issue 12's list of files that lost all
// their rules to one line: each line it cannot read is skipped and the
// rest of the file still applies.
func TestRobotsReadsPastBadLines(t *testing.T) {
	const rules = "Disallow: /private\n"
	for _, tc := range []struct{ name, body string }{
		{"byte-order mark before the first group", "\xEF\xBB\xBFUser-agent: *\n" + rules},
		{"Crawl-delay: -1", "User-agent: *\nCrawl-delay: -1\n" + rules},
		{"Crawl-delay: NaN", "User-agent: *\nCrawl-delay: NaN\n" + rules},
		{"Crawl-delay: inf", "User-agent: *\nCrawl-delay: inf\n" + rules},
		{"Crawl-delay: -Infinity", "User-agent: *\nCrawl-delay: -Infinity\n" + rules},
		{"Crawl-delay: soon", "User-agent: *\nCrawl-delay: soon\n" + rules},
		{"a line with no colon", "User-agent: *\nDisallow /x\n" + rules},
		{"garbage of several words", "User-agent: *\nthis is no directive\n" + rules},
		{"a colon and nothing else", "User-agent: *\n:\n" + rules},
		{"binary garbage", "User-agent: *\n\xff\xfe\x00\x01\n" + rules},
		{"CR-only, a rule before the first group", "Disallow: /x\rUser-agent: *\rDisallow: /private\r"},
		{"CRLF", "User-agent: *\r\nDisallow: /private\r\n"},
		{"mixed line endings", "User-agent: a\rDisallow: /a\r\nUser-agent: *\nDisallow: /private\r"},
		{"HTML served as robots.txt before the rules", "<html><body>\nUser-agent: *\n" + rules + "</body></html>"},
	} {
		r := ParseRobots(200, []byte(tc.body))
		for _, target := range []string{"/private", "/private/x?y=1"} {
			if r.allowedTarget(target, "spiderpool") {
				t.Errorf("%s: %s allowed; the file disallows it:\n%q", tc.name, target, tc.body)
			}
		}
		if !r.allowedTarget("/public", "spiderpool") {
			t.Errorf("%s: /public disallowed; the file allows it:\n%q", tc.name, tc.body)
		}
		if d := r.CrawlDelay("spiderpool"); d != 0 {
			t.Errorf("%s: crawl delay %v from an unreadable value", tc.name, d)
		}
	}
	// A missing colon between two words is read as one, as Google's parser
	// does: the webmaster's meaning is plain.
	if r := ParseRobots(200, []byte("User-agent: *\nDisallow /x\n")); r.allowedTarget("/x/y", "spiderpool") {
		t.Error("Disallow /x (no colon) was not read as Disallow: /x")
	}
}

// TestRobotsAgentIsWholeToken: a group applies to the agent its
// User-agent token names, never to an agent that merely starts with it.
func TestRobotsAgentIsWholeToken(t *testing.T) {
	r := ParseRobots(200, []byte("User-agent: spider\nDisallow: /\n\n"+
		"User-agent: spiderpool2\nDisallow: /\n\n"+
		"User-agent: *\nDisallow: /private\n"))
	if !r.allowedTarget("/page", "spiderpool") || r.allowedTarget("/private", "spiderpool") {
		t.Error(`spiderpool must follow the * group, not "spider" or "spiderpool2"`)
	}
	if r.allowedTarget("/page", "spider") || r.allowedTarget("/page", "Spider") {
		t.Error(`the "spider" group must apply to spider`)
	}
	r = ParseRobots(200, []byte("User-agent: SpiderPool/2.0 (+https://example.org)\nDisallow: /mine\n"+
		"User-agent: *\nDisallow: /\n"))
	if r.allowedTarget("/mine", "spiderpool") || !r.allowedTarget("/other", "spiderpool") {
		t.Error(`"SpiderPool/2.0 (...)" names the token spiderpool; its group must apply`)
	}
}

// TestRobotsQueryAsRequested: query rules judge the query as the request
// sends it, in the order it was linked.
func TestRobotsQueryAsRequested(t *testing.T) {
	r := ParseRobots(200, []byte("User-agent: *\nDisallow: /p?b=\nDisallow: /*&sid=\n"))
	for target, want := range map[string]bool{
		"/p?b=1&a=2":     false,
		"/p?a=2&b=1":     true,
		"/p":             true,
		"/q?x=1&sid=abc": false,
		"/q?sid=abc&x=1": true,
		"/robots.txt":    true,
	} {
		if got := r.allowedTarget(target, "spiderpool"); got != want {
			t.Errorf("allowedTarget(%q) = %v, want %v", target, got, want)
		}
	}
	// Allowed(URL), the one entry point callers have, judges the URL as it
	// is requested (as linked), not in its canonical (sorted) form.
	if r.Allowed(mustURL(t, "http://h/p?b=1"), "spiderpool") {
		t.Error("Allowed(http://h/p?b=1) = true under Disallow: /p?b=")
	}
	if r.Allowed(mustURL(t, "http://h/p?b=1&a=2"), "spiderpool") {
		t.Error("Allowed(http://h/p?b=1&a=2) = true under Disallow: /p?b=: it judged the sorted query a=2&b=1")
	}
	if !r.Allowed(mustURL(t, "http://h/q?sid=abc&x=1"), "spiderpool") {
		t.Error("Allowed(http://h/q?sid=abc&x=1) = false: it judged the sorted query x=1&sid=abc against /*&sid=")
	}
}

// TestRobotsEncoding: a rule and a target compare as the same octets
// however each writes them: raw non-ASCII in a rule, lower-case escapes in
// either.
func TestRobotsEncoding(t *testing.T) {
	r := ParseRobots(200, []byte("User-agent: *\nDisallow: /ü\nDisallow: /%e3%83%84\nDisallow: /a b\n"))
	for _, target := range []string{"/%C3%BC", "/%c3%bcber", "/%E3%83%84", "/%e3%83%84/x", "/a%20b"} {
		if r.allowedTarget(target, "spiderpool") {
			t.Errorf("%s allowed; a rule disallows it", target)
		}
	}
	if !r.allowedTarget("/u", "spiderpool") {
		t.Error("/u disallowed")
	}
}

// TestRobotsCutAtSizeLimit: a file longer than MaxRobotsBytes is read up
// to the last whole line; the part of a line cut in two is not a rule.
func TestRobotsCutAtSizeLimit(t *testing.T) {
	head := "User-agent: *\nDisallow: /private\n"
	allow := "Allow: /private/only-this-page\n"
	pad := strings.Repeat("#", MaxRobotsBytes-len(head)-len("Allow: /private/")-1) + "\n"
	body := head + pad + allow
	if len(body) <= MaxRobotsBytes || !strings.HasSuffix(string([]byte(body)[:MaxRobotsBytes]), "Allow: /private/") {
		t.Fatal("test file is not cut inside the Allow line")
	}
	r := ParseRobots(200, []byte(body))
	if r.allowedTarget("/private/other", "spiderpool") {
		t.Error("the cut Allow line allowed /private/other")
	}
}

// TestSitemapPriorities: each URL keeps its <priority>, before or after
// its <loc>; one without, or with a value outside 0..1, has 0.5.
func TestSitemapPriorities(t *testing.T) {
	doc := `<urlset>
<url><loc>http://h/a</loc><priority>0.9</priority></url>
<url><priority> 0.1 </priority><loc>http://h/b</loc></url>
<url><loc>http://h/c</loc></url>
<url><loc>http://h/d</loc><priority>7</priority></url>
<url><loc>http://h/e</loc><priority>high</priority></url></urlset>`
	sm, err := ParseSitemap([]byte(doc), 100, 1<<20)
	want := []float64{0.9, 0.1, 0.5, 0.5, 0.5}
	if err != nil || len(sm.URLs) != 5 || !slices.Equal(sm.Priorities, want) {
		t.Fatalf("urls %q priorities %v (%v), want %v", sm.URLs, sm.Priorities, err, want)
	}
}

// TestSitemapLastMods: each URL keeps its <lastmod>, in any W3C datetime
// precision; none, or one that does not parse, is zero.
func TestSitemapLastMods(t *testing.T) {
	doc := `<urlset>
<url><loc>http://h/a</loc><lastmod>2026-11-30</lastmod></url>
<url><lastmod>2026-11-30T10:20:30+01:00</lastmod><loc>http://h/b</loc></url>
<url><loc>http://h/c</loc><lastmod>2026-11-30T10:20Z</lastmod></url>
<url><loc>http://h/d</loc></url>
<url><loc>http://h/e</loc><lastmod>yesterday</lastmod></url></urlset>`
	sm, err := ParseSitemap([]byte(doc), 100, 1<<20)
	want := []time.Time{
		time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), time.Date(2026, 11, 30, 9, 20, 30, 0, time.UTC),
		time.Date(2026, 11, 30, 10, 20, 0, 0, time.UTC), {}, {},
	}
	if err != nil || len(sm.LastMods) != len(want) {
		t.Fatalf("lastmods %v (%v), want %v", sm.LastMods, err, want)
	}
	for i := range want {
		if !sm.LastMods[i].Equal(want[i]) {
			t.Errorf("%s: lastmod %v, want %v", sm.URLs[i], sm.LastMods[i], want[i])
		}
	}
}
