package crawl

import (
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/encoding/charmap"
	"golang.org/x/text/encoding/japanese"
)

// The URL requested is the one linked: only the fingerprint sorts the
// query (issue 12).
func TestLinkedKeepsQueryOrder(t *testing.T) {
	base, err := Canonicalize("http://h.example/dir/page?z=1")
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"/p?b=1&a=2", "http://h.example/p?b=1&a=2#frag", "//h.example/p?b=1&a=2", "../p?b=1&a=2"} {
		u, err := Resolve(base, ref)
		if err != nil {
			t.Fatal(err)
		}
		if u.String != "http://h.example/p?a=2&b=1" {
			t.Errorf("Resolve(%q).String = %q, want the sorted canonical form", ref, u.String)
		}
		if u.AsLinked != "http://h.example/p?b=1&a=2" || u.Target() != "/p?b=1&a=2" {
			t.Errorf("Resolve(%q): as linked %q, target %q; want the link's own order", ref, u.AsLinked, u.Target())
		}
	}
	u, err := Canonicalize("HTTP://user:pw@H.example:80?b&a")
	if err != nil {
		t.Fatal(err)
	}
	if u.AsLinked != "http://h.example/?b&a" || u.Target() != "/?b&a" || u.String != "http://h.example/?a&b" {
		t.Errorf("Canonicalize: %q as linked %q target %q", u.String, u.AsLinked, u.Target())
	}
	if (URL{String: "http://h/x?a=1", Scheme: "http", Host: "h"}).Linked() != "http://h/x?a=1" {
		t.Error("a URL without its linked form must request its canonical form")
	}
}

func TestDirectives(t *testing.T) {
	p := ExtractLinks([]byte(`<meta name="ROBOTS" content="NoIndex NOFOLLOW"><meta name="robots" content="noarchive">
		<link rel="stylesheet" href="/s.css"><link rel="Canonical" href=" /c?b&a "><link rel="canonical" href="/second">
		<a href="/x" rel="nofollow">x</a><a href="/y" rel="ugc noopener">y</a><a href="/z">z</a>`), 0)
	if !p.NoFollow || !p.NoIndex || !p.NoArchive {
		t.Errorf("meta robots: %+v, want all three", p.Directives)
	}
	if p.Canonical != "/c?b&a" {
		t.Errorf("canonical = %q, want the first rel=canonical", p.Canonical)
	}
	if strings.Join(p.Links, ",") != "/x,/y,/z" || len(p.RelNoFollow) != 3 || !p.RelNoFollow[0] || !p.RelNoFollow[1] || p.RelNoFollow[2] {
		t.Errorf("links %q rel=nofollow %v", p.Links, p.RelNoFollow)
	}
	if p := ExtractLinks([]byte(`<meta name="robots" content="none">`), 0); !p.NoFollow || !p.NoIndex || p.NoArchive {
		t.Errorf("none: %+v", p.Directives)
	}
	if p := ExtractLinks([]byte(`<meta name="description" content="nofollow">`), 0); p.NoFollow || p.For("spiderpool").NoFollow {
		t.Error("a meta other than robots must not set nofollow")
	}
	p = ExtractLinks([]byte(`<meta name="SpiderPool" content="nofollow"><meta name="otherbot" content="noindex">`+
		`<meta name="robots" content="noarchive">`), 0)
	if got, want := p.For("spiderpool"), (Directives{NoFollow: true, NoArchive: true}); got != want {
		t.Errorf("directives for spiderpool: %+v, want %+v", got, want)
	}
	if got, want := p.For("thirdbot"), (Directives{NoArchive: true}); got != want {
		t.Errorf("directives for another crawler: %+v, want %+v", got, want)
	}

	for _, c := range []struct {
		values []string
		want   Directives
	}{
		{[]string{"noindex, nofollow"}, Directives{NoIndex: true, NoFollow: true}},
		{[]string{"otherbot: nofollow", "noarchive"}, Directives{NoArchive: true}},
		{[]string{"SpiderPool: nofollow, otherbot: noindex"}, Directives{NoFollow: true}},
		{[]string{"unavailable_after: 25 Jun 2010 15:00:00 PST, noindex"}, Directives{NoIndex: true}},
		{[]string{"none"}, Directives{NoIndex: true, NoFollow: true}},
	} {
		if got := RobotsTag(c.values, "spiderpool"); got != c.want {
			t.Errorf("RobotsTag(%q) = %+v, want %+v", c.values, got, c.want)
		}
	}
}

func TestDecodeHTML(t *testing.T) {
	cyr, _ := charmap.Windows1251.NewEncoder().String("<title>Привет, мир</title><a href='/п?q=мир'>")
	sjis, _ := japanese.ShiftJIS.NewEncoder().String("<title>こんにちは世界</title>")
	latin, _ := charmap.ISO8859_1.NewEncoder().String("<title>Café crème</title>")
	sjisBare, _ := japanese.ShiftJIS.NewEncoder().String("<title>日本語のページ</title><p>これはテストです。カタカナも。</p>")
	cyrBare, _ := charmap.Windows1251.NewEncoder().String("<title>Новости дня</title><p>Сегодня в городе прошёл дождь.</p>")
	german, _ := charmap.Windows1252.NewEncoder().String("<title>Grüße für Müller</title>")
	quotes, _ := charmap.Windows1252.NewEncoder().String("<title>“Déjà” – été</title>")
	for _, c := range []struct {
		name, body, ctype, title, charset string
	}{
		{"header", cyr, "text/html; charset=windows-1251", "Привет, мир", "windows-1251"},
		{"meta", `<meta charset="shift_jis">` + sjis, "text/html", "こんにちは世界", "shift_jis"},
		{"http-equiv", `<meta http-equiv="Content-Type" content="text/html; charset=windows-1251">` + cyr, "text/html", "Привет, мир", "windows-1251"},
		{"sniffed", latin, "text/html", "Café crème", "windows-1252"},
		{"utf-8", "<title>Grüße</title>", "text/html", "Grüße", "utf-8"},
		{"utf-8 after 1024 bytes", "<!--" + strings.Repeat("x", 1100) + "--><title>Grüße</title>", "text/html", "Grüße", "utf-8"},
		{"sniffed shift_jis", sjisBare, "text/html", "日本語のページ", "shift_jis"},
		{"sniffed windows-1251", cyrBare, "text/html", "Новости дня", "windows-1251"},
		{"sniffed german", german, "text/html", "Grüße für Müller", "windows-1252"},
		{"sniffed quotes", quotes, "", "“Déjà” – été", "windows-1252"},
	} {
		d := DecodeHTML([]byte(c.body), c.ctype)
		if got := ExtractLinks(d.UTF8, 0).Title; got != c.title || d.Charset != c.charset {
			t.Errorf("%s: title %q charset %q, want %q %q", c.name, got, d.Charset, c.title, c.charset)
		}
	}

	// WHATWG URL: the query in the document's encoding, the path in UTF-8.
	d := DecodeHTML([]byte(cyr), "text/html; charset=windows-1251")
	href := ExtractLinks(d.UTF8, 0).Links[0]
	base, _ := Canonicalize("http://h.example/")
	u, err := Resolve(base, EncodeQuery(href, d.Encoding))
	if err != nil {
		t.Fatal(err)
	}
	if want := "http://h.example/%D0%BF?q=%EC%E8%F0"; u.AsLinked != want {
		t.Errorf("windows-1251 link = %q, want %q", u.AsLinked, want)
	}
	if got := EncodeQuery("/x?a=日本#frag€", charmap.Windows1251); got != "/x?a=%26%2326085%3B%26%2326412%3B#frag€" {
		t.Errorf("unmappable: %q", got)
	}
	if got := EncodeQuery("/x?a=日本", japanese.ShiftJIS); got != "/x?a=%93%FA%96{" {
		t.Errorf("shift_jis query: %q", got)
	}
	if got := EncodeQuery("/x?a=é", nil); got != "/x?a=é" {
		t.Errorf("utf-8 query changed: %q", got)
	}
}

// FuzzDecodeHTML: any bytes under any Content-Type decode without a panic;
// a legacy charset yields valid UTF-8, and a link's query encoded in it is
// ASCII, as a URL parser wants it.
func FuzzDecodeHTML(f *testing.F) {
	cyr, _ := charmap.Windows1251.NewEncoder().String("<title>мир</title>")
	f.Add([]byte(cyr), "text/html", "/x?q=мир#ф")
	f.Add([]byte("<meta charset=shift_jis>\x93\xfa"), "text/html", "?a=日本")
	f.Add([]byte("\xef\xbb\xbf<title>x</title>"), "text/html; charset=latin1", "?é")
	f.Fuzz(func(t *testing.T, body []byte, ctype, ref string) {
		d := DecodeHTML(body, ctype)
		if d.Encoding == nil {
			return
		}
		if !utf8.Valid(d.UTF8) {
			t.Fatalf("%s body decoded to invalid UTF-8", d.Charset)
		}
		if !utf8.ValidString(ref) {
			return // links come from decoded text
		}
		q := EncodeQuery(ref, d.Encoding)
		before, _, _ := strings.Cut(ref, "#")
		if !strings.Contains(before, "?") {
			if q != ref {
				t.Fatalf("EncodeQuery(%q) = %q: changed a link without a query", ref, q)
			}
			return
		}
		before, _, _ = strings.Cut(q, "#")
		if _, query, _ := strings.Cut(before, "?"); !isASCII(query) {
			t.Fatalf("EncodeQuery(%q) in %s = %q: query not ASCII", ref, d.Charset, q)
		}
	})
}
