package crawl

import (
	"strings"
	"testing"
)

// Benchmarks for the hot paths of a fetch: canonical form and fingerprint
// of a URL, resolving a link, and extracting a page's links.

func BenchmarkCanonicalizeFingerprint(b *testing.B) {
	for _, tc := range []struct{ name, url string }{
		{"canonical", "http://127.0.0.1:34567/p/123/456.html"},
		{"needs_parser", "HTTP://Example.COM:80/a/./b/../c?b=2&a=1#frag"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				u, err := Canonicalize(tc.url)
				if err != nil {
					b.Fatal(err)
				}
				_ = u.Fingerprint()
			}
		})
	}
}

func BenchmarkResolve(b *testing.B) {
	base, _ := Canonicalize("http://127.0.0.1:34567/p/123/456.html")
	for _, tc := range []struct{ name, ref string }{
		{"root_relative", "/p/77/12.html"},
		{"relative", "12.html"},
		{"absolute", "http://127.0.0.1:40000/p/9.html"},
		{"dot_segments", "../x/./y.html"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Resolve(base, tc.ref); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkExtractLinks(b *testing.B) {
	var page strings.Builder
	page.WriteString("<!doctype html><html><head><title>A page</title></head><body>")
	for i := range 20 {
		page.WriteString(`<p>Some text <a href="/p/` + string(rune('a'+i)) + `.html">link</a></p>`)
	}
	page.WriteString("</body></html>")
	doc := []byte(page.String())
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if p := ExtractLinks(doc, 1000); len(p.Links) != 20 {
			b.Fatal(len(p.Links))
		}
	}
}
