package crawl

import (
	"bytes"
	"compress/gzip"
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
