package crawl

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzCanonicalize checks the properties dedup relies on: a canonical URL is
// its own canonical form, is http(s) with a host, and carries no fragment.
func FuzzCanonicalize(f *testing.F) {
	for _, s := range []string{
		"http://example.com/", "HTTP://EXAMPLE.COM:80/a/../b?z=1&a=2#x", "https://[::1]:443/%7e",
		"http://bücher.example/ü", "http://a/b/./c/../../d?", "http://h/?a=1&&b", "http://%41.com/",
		"http://1.2.3.4:0/", "https://x.org:65535/" + strings.Repeat("a/", 50),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := Canonicalize(raw)
		if err != nil {
			return
		}
		if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
			t.Fatalf("%q canonicalised to %q with scheme %q host %q", raw, u.String, u.Scheme, u.Host)
		}
		if strings.Contains(u.String, "#") {
			t.Fatalf("%q kept a fragment: %q", raw, u.String)
		}
		again, err := Canonicalize(u.String)
		if err != nil {
			t.Fatalf("canonical %q of %q does not parse: %v", u.String, raw, err)
		}
		if again.String != u.String || again.Host != u.Host {
			t.Fatalf("not idempotent: %q -> %q -> %q", raw, u.String, again.String)
		}
		if !utf8.ValidString(u.String) {
			t.Fatalf("canonical form of %q is not UTF-8: %q", raw, u.String)
		}
	})
}

// FuzzResolve checks that whatever a page links to resolves to a canonical
// URL or an error, never a panic.
func FuzzResolve(f *testing.F) {
	for _, s := range []string{"../x", "//h/p", "?q", "#f", "javascript:x", "http://[", "/%zz", "\\\\evil\\path", "\t/a\n b"} {
		f.Add(s)
	}
	base, err := Canonicalize("http://base.example/dir/page.html?x=1")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, ref string) {
		u, err := Resolve(base, ref)
		if err != nil {
			return
		}
		if again, err := Canonicalize(u.String); err != nil || again.String != u.String {
			t.Fatalf("Resolve(%q) = %q, which re-canonicalises to %q (%v)", ref, u.String, again.String, err)
		}
	})
}

// FuzzExtractLinks feeds arbitrary bytes as HTML: no panic, the link cap
// holds, and the title is clean text.
func FuzzExtractLinks(f *testing.F) {
	for _, s := range []string{
		`<a href="/x">x</a>`, `<title>t</title><base href=/b/><a href=y>`, "<a href='\xff'>", `<iframe src=`,
		`<meta name=robots content=nofollow>`, `<!-- <a href=/hidden> -->`, `<script>"<a href=/s>"</script>`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		p := ExtractLinks(doc, 50)
		if len(p.Links) > 50 {
			t.Fatalf("%d links, cap 50", len(p.Links))
		}
		if !utf8.ValidString(p.Title) || strings.ContainsRune(p.Title, 0) || len(p.Title) > maxTitle {
			t.Fatalf("title %q is not clean", p.Title)
		}
	})
}

// FuzzRobots parses arbitrary robots.txt bodies: never a panic, and an
// allow-all file stays allow-all.
func FuzzRobots(f *testing.F) {
	for _, s := range []string{
		"User-agent: *\nDisallow: /", "User-agent: spiderpool\nAllow: /a\nDisallow: /\nCrawl-delay: 2",
		"Disallow: /x\nUser-agent: *", "User-agent: *\nDisallow: /*.php$\nAllow: /$", "Sitemap: http://h/s.xml",
		"User-agent: *\nCrawl-delay: abc", "\xff\xfe\x00", "User-agent: *\nDisallow: /[", strings.Repeat("User-agent: a\n", 100),
	} {
		f.Add(s, "/some/path?q=1")
	}
	u, err := Canonicalize("http://h/")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body, path string) {
		r := ParseRobots(200, []byte(body))
		target, err := Resolve(u, path)
		if err != nil {
			target = u
		}
		_ = r.Allowed(target, "spiderpool")
		_ = r.allowedTarget(path, "spiderpool")
		if d := r.CrawlDelay("spiderpool"); d < 0 {
			t.Fatalf("negative crawl delay %v", d)
		}
		if missing := ParseRobots(404, []byte(body)); !missing.Allowed(target, "spiderpool") || !missing.allowedTarget(path, "spiderpool") {
			t.Fatal("a missing robots.txt must allow all")
		}
	})
}

// FuzzSitemap feeds arbitrary bytes as a sitemap.
func FuzzSitemap(f *testing.F) {
	f.Add([]byte(`<urlset><url><loc>http://h/a</loc></url></urlset>`))
	f.Add([]byte(`<sitemapindex><sitemap><loc>x</loc></sitemap>`))
	f.Add([]byte{0x1f, 0x8b, 0, 0})
	f.Fuzz(func(t *testing.T, doc []byte) {
		sm, _ := ParseSitemap(doc, 10, 1<<16)
		if len(sm.URLs)+len(sm.Sitemaps) > 10 {
			t.Fatalf("%d entries, cap 10", len(sm.URLs)+len(sm.Sitemaps))
		}
	})
}

// FuzzFastPathAgrees checks the fast path against the WHATWG parser:
// wherever it answers, it answers exactly as the parser does.
func FuzzFastPathAgrees(f *testing.F) {
	for _, s := range []string{
		"http://example.com/a/b?z=1&a=2", "http://127.0.0.1:8080/p/1.html", "https://h/x#frag", "http://1.2.3/x",
		"http://h:80/", "http://h:0080/", "http://h/a/./b", "http://h/%2e/x", "http://H/x", "http://h/x?", "http://h/a b",
		"http://0x7f.1/", "http://h./", "http://a..b/", "http://xn--bcher-kva.example/", "http://h/%41%zz", "http://h/p?q='x'",
	} {
		f.Add(s, "../x")
		f.Add(s, "3.html")
		f.Add(s, "?q=2")
		f.Add(s, "//other/x")
	}
	f.Fuzz(func(t *testing.T, raw, ref string) {
		raw = strings.TrimSpace(raw)
		if fast, ok := fastCanonical(raw); ok {
			slow, err := slowCanonicalize(raw)
			if err != nil || slow.String != fast.String || slow.AsLinked != fast.AsLinked || slow.Host != fast.Host || slow.Hostname != fast.Hostname || slow.Scheme != fast.Scheme {
				t.Fatalf("Canonicalize(%q): fast %+v, parser %+v (%v)", raw, fast, slow, err)
			}
		}
		base, err := slowCanonicalize(raw)
		if err != nil {
			return
		}
		ref = strings.TrimSpace(ref)
		abs, ok := fastResolve(base, ref)
		if !ok {
			return
		}
		fast, ok := fastCanonical(abs)
		if !ok {
			return
		}
		slow, err := slowResolve(base, ref)
		if err != nil || slow.String != fast.String || slow.AsLinked != fast.AsLinked || slow.Host != fast.Host {
			t.Fatalf("Resolve(%q, %q): fast %q (%q), parser %q (%q) (%v)", base.String, ref, fast.String, fast.AsLinked, slow.String, slow.AsLinked, err)
		}
	})
}
