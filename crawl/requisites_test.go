package crawl

import (
	"slices"
	"testing"
	"unicode/utf8"
)

func TestSrcsetByTheStandard(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"a.png", []string{"a.png"}},
		{"a.png 1x, b.png 2x", []string{"a.png", "b.png"}},
		{" a.png  480w ,b.png 800w,", []string{"a.png", "b.png"}},
		// A comma inside a URL is the URL's; one ending it ends the candidate.
		{"img,1.png 1x, img,2.png 2x", []string{"img,1.png", "img,2.png"}},
		{"a.png,b.png 2x", []string{"a.png,b.png"}}, // as the standard reads it
		// Descriptors may hold parenthesised commas (future syntax).
		{"a.png (x, y), b.png", []string{"a.png", "b.png"}},
		{",,, ", nil},
	} {
		if got := Srcset(c.in); !slices.Equal(got, c.want) {
			t.Errorf("Srcset(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestCSSURLs(t *testing.T) {
	css := `@import "base.css";
@IMPORT url('print.css') print;
/* url(commented.png) */
body { background: URL( "bg.png" ) no-repeat; content: "url(not-a-url.png)" }
@font-face { font-family: F; src: url(fonts/f.woff2) format("woff2"), url('fonts/f.woff'); }
.a { background-image: url(data:image/png;base64,AAAA) }
.b { background: url(sp\ ace.png) }
.c { mask: url(\31 23.svg) }
.d { x: myurl(no.png) }
.e { background: url(unterminated.png`
	want := []string{"base.css", "print.css", "bg.png", "fonts/f.woff2", "fonts/f.woff", "sp ace.png", "123.svg", "unterminated.png"}
	if got := CSSURLs([]byte(css), 0); !slices.Equal(got, want) {
		t.Errorf("CSSURLs =\n%q\nwant\n%q", got, want)
	}
	if got := CSSURLs([]byte(css), 2); len(got) != 2 {
		t.Errorf("CSSURLs with max 2 gave %d", len(got))
	}
}

func TestExtractRequisites(t *testing.T) {
	doc := `<html><head><link rel="stylesheet" href="/s.css"><link rel="icon" href="/favicon.ico">
<link rel="canonical" href="/c"><link rel="alternate" href="/feed"><link rel="preload" as="font" href="/f.woff2">
<script src="/app.js"></script><script>var x = "url(no.png)";</script>
<style>h1 { background: url(/h1.png) }</style></head>
<body background="/bg.gif"><img src="/i.png" srcset="/i-2x.png 2x, /i-3x.png 3x">
<picture><source srcset="/p.webp" type="image/webp"><img src="/p.jpg"></picture>
<input type="IMAGE" src="/btn.png"><input type="text" src="/no.png"><video poster="/poster.jpg" src="/movie.mp4"></video>
<div style="background:url('/div.png')"></div><img src="data:image/gif;base64,R0lG">
<a href="/page">page</a><iframe src="/frame.html"></iframe></body></html>`
	p := Extract([]byte(doc), ExtractOptions{Requisites: true})
	want := []string{"/s.css", "/favicon.ico", "/f.woff2", "/app.js", "/h1.png", "/bg.gif", "/i.png", "/i-2x.png", "/i-3x.png",
		"/p.webp", "/p.jpg", "/btn.png", "/movie.mp4", "/poster.jpg", "/div.png"}
	if !slices.Equal(p.Requisites, want) {
		t.Errorf("requisites\n%q\nwant\n%q", p.Requisites, want)
	}
	if !slices.Equal(p.Links, []string{"/page", "/frame.html"}) || p.Canonical != "/c" {
		t.Errorf("links %q canonical %q: requisites must not change what links are", p.Links, p.Canonical)
	}
	if q := ExtractLinks([]byte(doc), 0); q.Requisites != nil || !slices.Equal(q.Links, p.Links) {
		t.Errorf("without Requisites: requisites %q links %q", q.Requisites, q.Links)
	}
	if q := Extract([]byte(doc), ExtractOptions{MaxLinks: 3, Requisites: true}); len(q.Requisites) != 3 || !q.Truncated {
		t.Errorf("capped at 3: %d requisites, truncated %v", len(q.Requisites), q.Truncated)
	}
}

// TestExtractEmbeddedRequisites: what wget -p fetches beyond images,
// stylesheets and scripts is a requisite too: SVGs embedded with <object
// data> (PostgreSQL's docs), <embed src>, media and their tracks, and an
// OpenSearch description (Python's docs). A rel=search link to an HTML
// search page is a link, not a requisite.
func TestExtractEmbeddedRequisites(t *testing.T) {
	doc := `<html><head>
<link rel="search" type="application/opensearchdescription+xml" title="Search" href="/_static/opensearch.xml">
<link rel="search" href="/search.html">
</head><body>
<object type="image/svg+xml" data="/images/gin.svg">fallback</object>
<embed type="image/svg+xml" src="/images/plan.svg">
<video src="/movie.mp4" poster="/poster.jpg"><source src="/movie.webm" type="video/webm"><track kind="captions" src="/movie.vtt"></video>
<audio src="/sound.ogg"></audio>
</body></html>`
	p := Extract([]byte(doc), ExtractOptions{Requisites: true})
	want := []string{"/_static/opensearch.xml", "/images/gin.svg", "/images/plan.svg", "/movie.mp4", "/poster.jpg", "/movie.webm", "/movie.vtt", "/sound.ogg"}
	if !slices.Equal(p.Requisites, want) {
		t.Errorf("requisites\n%q\nwant\n%q", p.Requisites, want)
	}
}

// FuzzCSSURLs checks that reading any stylesheet ends, never panics, and
// yields valid UTF-8 from valid UTF-8 and no data: URLs.
func FuzzCSSURLs(f *testing.F) {
	for _, s := range []string{`a{background:url(x.png)}`, `@import "a.css";`, `url(\`, `url("\31 `, `/*`, `url(`, `"`, `@import '`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, css string) {
		for _, u := range CSSURLs([]byte(css), 0) {
			if utf8.ValidString(css) && !utf8.ValidString(u) {
				t.Fatalf("%q gave invalid UTF-8 %q", css, u)
			}
			if len(u) >= 5 && (u[:5] == "data:" || u[:5] == "DATA:") {
				t.Fatalf("%q gave a data URL %q", css, u)
			}
		}
		Srcset(css)
	})
}
