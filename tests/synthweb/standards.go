package synthweb

import (
	"fmt"
	"net/http"

	"golang.org/x/text/encoding"
	"golang.org/x/text/encoding/charmap"
	"golang.org/x/text/encoding/japanese"
)

// StandardsRobots is the robots.txt of the standards site: a byte-order
// mark before its first line, CRLF line endings, a Crawl-delay no parser
// can use, a rule on a directory and a rule on a query (issue 12).
const StandardsRobots = "\xEF\xBB\xBFUser-agent: *\r\n" +
	"Crawl-delay: -1\r\n" +
	"Disallow: /std/private/\r\n" +
	"Disallow: /std/q?b=\r\n" +
	"\r\n"

// Paths of the standards site. The index links to each of the others.
const (
	StdIndex          = "/std/"
	StdPrivate        = "/std/private/secret.html"  // disallowed by directory
	StdQueryDisallow  = "/std/q?b=1&a=2"            // disallowed as linked, not once its query is sorted
	StdQueryOrder     = "/std/list?z=9&a=1"         // allowed: requested with its query as linked
	StdMetaNoFollow   = "/std/meta-nofollow.html"   // <meta name=robots content=nofollow>
	StdHeaderNoFollow = "/std/header-nofollow.html" // X-Robots-Tag: nofollow
	StdFromMeta       = "/std/from-meta.html"       // linked only from the meta nofollow page
	StdFromHeader     = "/std/from-header.html"     // linked only from the X-Robots-Tag page
	StdWindows1251    = "/std/cp1251.html"          // charset in the Content-Type header
	StdShiftJIS       = "/std/sjis.html"            // charset in a <meta> tag only
	StdLatin1         = "/std/latin1.html"          // no charset anywhere: sniffed
	StdSniffedSJIS    = "/std/sniffed-sjis.html"    // Shift_JIS, declared nowhere
	StdSniffed1251    = "/std/sniffed-1251.html"    // windows-1251, declared nowhere
	StdNoArchive      = "/std/noarchive.html"       // meta noindex, X-Robots-Tag noarchive
	StdCanonical      = "/std/canonical.html"       // <base href> and <link rel=canonical>
	StdRelNoFollow    = "/std/sponsored.html"       // linked with rel=nofollow only
	StdBadRedirect    = "/std/bad-redirect"         // redirects to StdBadLocation
	StdBadLocation    = "ftp://h/\xEC"              // not http(s), and not UTF-8
	StdCyrillicQuery  = "/std/found?q=%EC%E8%F0"    // the windows-1251 page's link ?q=мир, as browsers send it
	StdCanonicalOf    = "/std/list?z=9&a=1"         // what StdCanonical names canonical
	StdBaseLinked     = "/std/based/target.html"    // StdCanonical's link "target.html" under its <base>
	TitleWindows1251  = "Привет, мир"               // StdWindows1251's title
	TitleShiftJIS     = "こんにちは世界"                   // StdShiftJIS's title
	TitleLatin1       = "Café crème"                // StdLatin1's title
	TitleSniffedSJIS  = "日本語のページ"                   // StdSniffedSJIS's title
	TitleSniffed1251  = "Новости дня"               // StdSniffed1251's title
)

const (
	titleLeaf         = "standards leaf" // pages with nothing to say
	htmlUTF8          = "text/html; charset=utf-8"
	htmlNoCharset     = "text/html" // let the page, or a guess, say
	xRobotsTag        = "X-Robots-Tag"
	contentType       = "Content-Type"
	standardsIndexFmt = `<!doctype html><html><head><title>standards</title></head><body>%s</body></html>`
)

// StandardsSite serves the pages of issue 12's acceptance tests, to mount
// with Config.Custom on one host, its index linked from that host's root
// with Config.ExtraLinks: robots.txt edge cases, query order, meta robots
// and X-Robots-Tag, legacy charsets, <base> and rel=canonical.
func StandardsSite() map[string]http.HandlerFunc {
	page := func(ctype, body string, header ...string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			for i := 0; i+1 < len(header); i += 2 {
				w.Header().Add(header[i], header[i+1])
			}
			w.Header().Set(contentType, ctype)
			_, _ = w.Write([]byte(body))
		}
	}
	leaf := page(htmlUTF8, "<!doctype html><title>"+titleLeaf+"</title>")
	var links string
	for _, p := range []string{StdPrivate, StdQueryDisallow, StdQueryOrder, StdMetaNoFollow, StdHeaderNoFollow,
		StdWindows1251, StdShiftJIS, StdLatin1, StdSniffedSJIS, StdSniffed1251, StdNoArchive, StdCanonical, StdBadRedirect} {
		links += fmt.Sprintf("<a href=%q>x</a>\n", p)
	}
	links += fmt.Sprintf("<a rel=\"nofollow\" href=%q>ad</a>\n", StdRelNoFollow)
	return map[string]http.HandlerFunc{
		"/robots.txt":   page("text/plain", StandardsRobots),
		StdIndex:        page(htmlUTF8, fmt.Sprintf(standardsIndexFmt, links)),
		"/std/private/": leaf,
		"/std/q":        leaf,
		"/std/list":     leaf,
		"/std/found":    leaf,
		StdFromMeta:     leaf,
		StdFromHeader:   leaf,
		StdRelNoFollow:  leaf,
		StdBaseLinked:   leaf,
		StdBadRedirect: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Location", StdBadLocation)
			w.WriteHeader(http.StatusFound)
		},
		StdMetaNoFollow: page(htmlUTF8, `<!doctype html><html><head><meta name="robots" content="index, nofollow">`+
			`<title>meta nofollow</title></head><body><a href="`+StdFromMeta+`">no</a></body></html>`),
		StdHeaderNoFollow: page(htmlUTF8, `<!doctype html><title>header nofollow</title><a href="`+StdFromHeader+`">no</a>`,
			xRobotsTag, "otherbot: noarchive", xRobotsTag, "nofollow"),
		StdWindows1251: page("text/html; charset=windows-1251", encode(charmap.Windows1251,
			`<!doctype html><html><head><title>`+TitleWindows1251+`</title></head><body><a href="found?q=мир">мир</a></body></html>`)),
		StdShiftJIS: page(htmlNoCharset, encode(japanese.ShiftJIS,
			`<!doctype html><html><head><meta charset="Shift_JIS"><title>`+TitleShiftJIS+`</title></head><body>日本</body></html>`)),
		StdLatin1: page(htmlNoCharset, encode(charmap.ISO8859_1,
			`<!doctype html><html><head><title>`+TitleLatin1+`</title></head><body>déjà vu</body></html>`)),
		StdSniffedSJIS: page(htmlNoCharset, encode(japanese.ShiftJIS,
			`<!doctype html><html><head><title>`+TitleSniffedSJIS+`</title></head><body>これはテストです。</body></html>`)),
		StdSniffed1251: page(htmlNoCharset, encode(charmap.Windows1251,
			`<!doctype html><html><head><title>`+TitleSniffed1251+`</title></head><body>Сегодня в городе прошёл дождь.</body></html>`)),
		StdNoArchive: page(htmlUTF8, `<!doctype html><head><meta name="robots" content="noindex"><title>private</title></head>`,
			xRobotsTag, "noarchive"),
		StdCanonical: page(htmlUTF8, `<!doctype html><head><base href="/std/based/"><link rel="canonical" href="`+StdCanonicalOf+`">`+
			`<title>canonical</title></head><body><a href="target.html">t</a></body></html>`,
			"Content-Location", "/std/elsewhere/"),
	}
}

// encode writes s, UTF-8 in the source, in enc.
func encode(enc encoding.Encoding, s string) string {
	out, err := enc.NewEncoder().String(s)
	if err != nil {
		panic(fmt.Sprintf("synthweb: %q cannot be written in %v: %v", s, enc, err))
	}
	return out
}
