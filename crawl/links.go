package crawl

import (
	"bytes"
	"slices"
	"strings"
	"unicode"
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
	// RelNoFollow[i] says Links[i] carries rel="nofollow" (or "ugc",
	// "sponsored", which mean the same to a crawler).
	RelNoFollow []bool
	// Base is the document's <base href>, if any.
	Base string
	// Canonical is the href of the document's first <link rel="canonical">.
	Canonical string
	// Directives are those of <meta name="robots">.
	Directives
	// ForAgent are those of <meta name="AGENT"> by lower-case agent token
	// ("googlebot", "spiderpool"): they apply to that crawler only.
	ForAgent map[string]Directives
	// Requisites are the raw URLs of what the page needs to render, in
	// document order, duplicates included (with ExtractOptions.Requisites):
	// img src and srcset, picture/video sources' srcset, scripts,
	// stylesheets, icons and preloads, input type=image, video posters,
	// background attributes, and url() in style attributes and <style>.
	Requisites []string
	// Truncated is set when the page had more than maxLinks links (or
	// requisites).
	Truncated bool
}

// Directives are a page's robots directives, from <meta name="robots">
// or the X-Robots-Tag header.
type Directives struct {
	// NoFollow: take no links from the page.
	NoFollow bool
	// NoIndex: the page asks not to be indexed (recorded, for users).
	NoIndex bool
	// NoArchive: the page asks not to be archived (kept out of WARC).
	NoArchive bool
}

// Merge adds o's directives to d: each source can only forbid more.
func (d Directives) Merge(o Directives) Directives {
	return Directives{NoFollow: d.NoFollow || o.NoFollow, NoIndex: d.NoIndex || o.NoIndex, NoArchive: d.NoArchive || o.NoArchive}
}

// apply reads one directive token ("nofollow", "none" ...); unknown ones
// ("max-snippet:10", "noimageindex") are no concern of a crawler.
func (d *Directives) apply(token string) {
	switch strings.ToLower(strings.TrimSpace(token)) {
	case "nofollow":
		d.NoFollow = true
	case "noindex":
		d.NoIndex = true
	case "noarchive":
		d.NoArchive = true
	case "none": // noindex, nofollow
		d.NoIndex, d.NoFollow = true, true
	}
}

// RobotsTag reads X-Robots-Tag header values for agent (a robots.txt
// product token): "noindex, nofollow" applies to every crawler, while
// "otherbot: nofollow" applies only to otherbot, until the next agent
// prefix in the same value.
func RobotsTag(values []string, agent string) Directives {
	var d Directives
	for _, v := range values {
		applies := true
		for _, tok := range strings.Split(v, ",") {
			if name, rest, ok := strings.Cut(tok, ":"); ok && !valuedDirective(name) {
				name = strings.TrimSpace(name)
				applies = strings.EqualFold(name, agent)
				tok = rest
			}
			if applies {
				d.apply(tok)
			}
		}
	}
	return d
}

// valuedDirective is true of directives that take a value after a colon,
// which an agent prefix must not be mistaken for.
func valuedDirective(name string) bool {
	switch strings.ToLower(strings.TrimSpace(name)) {
	case "unavailable_after", "max-snippet", "max-image-preview", "max-video-preview":
		return true
	}
	return false
}

// readMeta takes the directives of <meta name="robots"> and of a meta
// named after a crawler. Other metas (description, viewport) are not
// directives; the one whose content happens to read as some is kept under
// its name, where no crawler looks.
func (p *Page) readMeta(name, content string) {
	if name == "" || !ValidAgentToken(name) {
		return
	}
	var d Directives
	for _, tok := range strings.FieldsFunc(content, func(r rune) bool { return r == ',' || unicode.IsSpace(r) }) {
		d.apply(tok)
	}
	switch {
	case name == "robots":
		p.Directives = p.Directives.Merge(d)
	case d != Directives{}:
		if p.ForAgent == nil {
			p.ForAgent = map[string]Directives{}
		}
		p.ForAgent[name] = p.ForAgent[name].Merge(d)
	}
}

// For is what the page's metas ask of agent (a robots.txt product token):
// <meta name="robots"> and <meta name="agent">.
func (p *Page) For(agent string) Directives {
	return p.Directives.Merge(p.ForAgent[strings.ToLower(agent)])
}

// relNoFollow says whether a rel attribute's value asks crawlers not to
// follow the link.
func relNoFollow(rel string) bool {
	for _, t := range strings.Fields(strings.ToLower(rel)) {
		if t == "nofollow" || t == "ugc" || t == "sponsored" {
			return true
		}
	}
	return false
}

const maxTitle = 512

// ExtractOptions say what Extract takes from a document.
type ExtractOptions struct {
	// MaxLinks caps the links taken, and the requisites (0: no cap).
	MaxLinks int
	// Requisites collects Page.Requisites.
	Requisites bool
}

// ExtractLinks is Extract of links only, at most maxLinks of them (0 means
// no limit).
func ExtractLinks(body []byte, maxLinks int) Page {
	return Extract(body, ExtractOptions{MaxLinks: maxLinks})
}

// Extract tokenises an HTML document and returns its title and links, and
// with o.Requisites what it needs to render. It never fails: broken markup
// and invalid UTF-8 yield whatever links the tokenizer can see, as a
// browser would. A streaming tokenizer, not a DOM, keeps it fast and its
// memory bounded by the largest token.
func Extract(body []byte, o ExtractOptions) Page {
	var p Page
	maxLinks := o.MaxLinks
	z := html.NewTokenizer(bytes.NewReader(body))
	z.SetMaxBuf(1 << 20) // a single token longer than 1 MiB ends parsing
	inTitle, inStyle := false, false
	var title strings.Builder
	requisite := func(raw ...string) {
		for _, r := range raw {
			if r = strings.TrimSpace(r); r == "" || strings.HasPrefix(strings.ToLower(r), "data:") {
				continue
			}
			if maxLinks > 0 && len(p.Requisites) >= maxLinks {
				p.Truncated = true
				return
			}
			p.Requisites = append(p.Requisites, r)
		}
	}
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
			if inStyle {
				requisite(CSSURLs(z.Text(), 0)...)
			}
		case html.EndTagToken:
			switch name, _ := z.TagName(); atom.Lookup(name) {
			case atom.Title:
				inTitle = false
			case atom.Style:
				inStyle = false
			}
		case html.StartTagToken, html.SelfClosingTagToken:
			name, hasAttr := z.TagName()
			a := atom.Lookup(name)
			switch a {
			case atom.Title:
				inTitle = p.Title == "" && title.Len() == 0 && tt == html.StartTagToken
				continue
			case atom.Style:
				inStyle = o.Requisites && tt == html.StartTagToken
				continue
			case atom.A, atom.Area, atom.Base, atom.Frame, atom.Iframe, atom.Meta, atom.Link:
			default:
				if !o.Requisites {
					continue
				}
			}
			if !hasAttr {
				continue
			}
			var href, src, data, rel, metaName, metaContent, srcset, poster, typ, style, background string
			for {
				k, v, more := z.TagAttr()
				switch string(k) {
				case "href":
					href = string(v)
				case "src":
					src = string(v)
				case "rel":
					rel = string(v)
				case "name":
					metaName = strings.ToLower(string(v))
				case "content":
					metaContent = string(v)
				case "srcset":
					srcset = string(v)
				case "poster":
					poster = string(v)
				case "data":
					data = string(v)
				case "type":
					typ = string(v)
				case "style":
					style = string(v)
				case "background":
					background = string(v)
				}
				if !more {
					break
				}
			}
			if o.Requisites {
				switch a {
				case atom.Img, atom.Source:
					requisite(src)
					requisite(Srcset(srcset)...)
				case atom.Script, atom.Embed, atom.Audio, atom.Track:
					requisite(src)
				case atom.Object:
					requisite(data)
				case atom.Input:
					if strings.EqualFold(strings.TrimSpace(typ), "image") {
						requisite(src)
					}
				case atom.Video:
					requisite(src, poster)
				case atom.Link:
					if isRequisiteLink(rel, typ) {
						requisite(href)
					}
				}
				requisite(background)
				if style != "" {
					requisite(CSSURLs([]byte(style), 0)...)
				}
			}
			var (
				link     string
				nofollow bool
			)
			switch a {
			case atom.A, atom.Area:
				link, nofollow = href, relNoFollow(rel)
			case atom.Link:
				if p.Canonical == "" && slices.Contains(strings.Fields(strings.ToLower(rel)), "canonical") {
					p.Canonical = strings.TrimSpace(href)
				}
			case atom.Frame, atom.Iframe:
				link = src
			case atom.Base:
				if p.Base == "" {
					p.Base = strings.TrimSpace(href)
				}
			case atom.Meta:
				p.readMeta(metaName, metaContent)
			}
			if link = strings.TrimSpace(link); link == "" {
				continue
			}
			if maxLinks > 0 && len(p.Links) >= maxLinks {
				p.Truncated = true
				continue
			}
			p.Links = append(p.Links, link)
			p.RelNoFollow = append(p.RelNoFollow, nofollow)
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
