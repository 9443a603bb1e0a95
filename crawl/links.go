package crawl

import (
	"bytes"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// Page is what link extraction learns from an HTML document.
type Page struct {
	Title string
	// Links are the raw href/src values in document order, duplicates
	// included; resolve them against Base.
	Links []string
	// Base is the document's <base href>, if any.
	Base string
	// NoFollow is set by <meta name="robots" content="nofollow">.
	NoFollow bool
	// Truncated is set when the page had more than maxLinks links.
	Truncated bool
}

const maxTitle = 512

// ExtractLinks tokenises an HTML document and returns its title and links,
// at most maxLinks of them (0 means no limit). It never fails: broken markup
// and invalid UTF-8 yield whatever links the tokenizer can see, as a browser
// would. A streaming tokenizer, not a DOM, keeps it fast and its memory
// bounded by the largest token.
func ExtractLinks(body []byte, maxLinks int) Page {
	var p Page
	z := html.NewTokenizer(bytes.NewReader(body))
	z.SetMaxBuf(1 << 20) // a single token longer than 1 MiB ends parsing
	inTitle := false
	var title strings.Builder
	for {
		tt := z.Next()
		switch tt {
		case html.ErrorToken:
			p.Title = cleanText(title.String())
			return p
		case html.TextToken:
			if inTitle && title.Len() < maxTitle {
				title.Write(z.Text())
			}
		case html.EndTagToken:
			if name, _ := z.TagName(); atom.Lookup(name) == atom.Title {
				inTitle = false
			}
		case html.StartTagToken, html.SelfClosingTagToken:
			name, hasAttr := z.TagName()
			a := atom.Lookup(name)
			switch a {
			case atom.Title:
				inTitle = p.Title == "" && title.Len() == 0 && tt == html.StartTagToken
				continue
			case atom.A, atom.Area, atom.Base, atom.Frame, atom.Iframe, atom.Meta:
			default:
				continue
			}
			if !hasAttr {
				continue
			}
			var href, src, metaName, metaContent string
			for {
				k, v, more := z.TagAttr()
				switch string(k) {
				case "href":
					href = string(v)
				case "src":
					src = string(v)
				case "name":
					metaName = strings.ToLower(string(v))
				case "content":
					metaContent = strings.ToLower(string(v))
				}
				if !more {
					break
				}
			}
			var link string
			switch a {
			case atom.A, atom.Area:
				link = href
			case atom.Frame, atom.Iframe:
				link = src
			case atom.Base:
				if p.Base == "" {
					p.Base = strings.TrimSpace(href)
				}
			case atom.Meta:
				if metaName == "robots" && strings.Contains(metaContent, "nofollow") {
					p.NoFollow = true
				}
			}
			if link = strings.TrimSpace(link); link == "" {
				continue
			}
			if maxLinks > 0 && len(p.Links) >= maxLinks {
				p.Truncated = true
				continue
			}
			p.Links = append(p.Links, link)
		}
	}
}

// cleanText collapses whitespace, drops NULs and replaces invalid UTF-8, so
// a title is safe to store in Postgres and to print.
func cleanText(s string) string {
	s = strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "\uFFFD")
	s = strings.Join(strings.Fields(s), " ")
	for len(s) > maxTitle {
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	return s
}
