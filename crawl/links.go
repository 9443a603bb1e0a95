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
	e := extractor{o: o, z: html.NewTokenizer(bytes.NewReader(body))}
	e.z.SetMaxBuf(1 << 20) // a single token longer than 1 MiB ends parsing
	for {
		switch tt := e.z.Next(); tt {
		case html.ErrorToken:
			e.p.Title = cleanText(e.title.String())
			return e.p
		case html.TextToken:
			e.text(e.z.Text())
		case html.EndTagToken:
			e.endTag()
		case html.StartTagToken, html.SelfClosingTagToken:
			e.startTag(tt)
		}
	}
}

// extractor is Extract's state between tokens.
type extractor struct {
	o       ExtractOptions
	z       *html.Tokenizer
	p       Page
	title   strings.Builder
	inTitle bool // inside the first <title>
	inStyle bool // inside a <style>, when collecting requisites
}

// tagAttrs are the attributes of one tag that Extract reads.
type tagAttrs struct {
	href, src, data, rel, metaName, metaContent, srcset, poster, typ, style, background string
}

func (e *extractor) text(t []byte) {
	if e.inTitle && e.title.Len() < maxTitle {
		e.title.Write(t)
	}
	if e.inStyle {
		e.requisite(CSSURLs(t, 0)...)
	}
}

func (e *extractor) endTag() {
	switch name, _ := e.z.TagName(); atom.Lookup(name) {
	case atom.Title:
		e.inTitle = false
	case atom.Style:
		e.inStyle = false
	}
}

// startTag reads a tag that opens the title or a style, links, or (with
// o.Requisites) needs something to render; other tags' attributes are not
// read at all.
func (e *extractor) startTag(tt html.TokenType) {
	name, hasAttr := e.z.TagName()
	a := atom.Lookup(name)
	switch a {
	case atom.Title:
		e.inTitle = e.p.Title == "" && e.title.Len() == 0 && tt == html.StartTagToken
		return
	case atom.Style:
		e.inStyle = e.o.Requisites && tt == html.StartTagToken
		return
	case atom.A, atom.Area, atom.Base, atom.Frame, atom.Iframe, atom.Meta, atom.Link:
	default:
		if !e.o.Requisites {
			return
		}
	}
	if !hasAttr {
		return
	}
	t := readAttrs(e.z)
	if e.o.Requisites {
		e.requisitesOf(a, &t)
	}
	e.linksOf(a, &t)
}

// readAttrs reads the current tag's attributes, keeping the last of each
// name Extract uses.
func readAttrs(z *html.Tokenizer) tagAttrs {
	var t tagAttrs
	for {
		k, v, more := z.TagAttr()
		switch string(k) {
		case "href":
			t.href = string(v)
		case "src":
			t.src = string(v)
		case "rel":
			t.rel = string(v)
		case "name":
			t.metaName = strings.ToLower(string(v))
		case "content":
			t.metaContent = string(v)
		case "srcset":
			t.srcset = string(v)
		case "poster":
			t.poster = string(v)
		case "data":
			t.data = string(v)
		case "type":
			t.typ = string(v)
		case "style":
			t.style = string(v)
		case "background":
			t.background = string(v)
		}
		if !more {
			return t
		}
	}
}

// requisitesOf collects what tag a needs to render.
func (e *extractor) requisitesOf(a atom.Atom, t *tagAttrs) {
	switch a {
	case atom.Img, atom.Source:
		e.requisite(t.src)
		e.requisite(Srcset(t.srcset)...)
	case atom.Script, atom.Embed, atom.Audio, atom.Track:
		e.requisite(t.src)
	case atom.Object:
		e.requisite(t.data)
	case atom.Input:
		if strings.EqualFold(strings.TrimSpace(t.typ), "image") {
			e.requisite(t.src)
		}
	case atom.Video:
		e.requisite(t.src, t.poster)
	case atom.Link:
		if isRequisiteLink(t.rel, t.typ) {
			e.requisite(t.href)
		}
	}
	e.requisite(t.background)
	if t.style != "" {
		e.requisite(CSSURLs([]byte(t.style), 0)...)
	}
}

// requisite adds raw URLs to Page.Requisites, skipping empty and data:
// ones, until o.MaxLinks.
func (e *extractor) requisite(raw ...string) {
	for _, r := range raw {
		if r = strings.TrimSpace(r); r == "" || strings.HasPrefix(strings.ToLower(r), "data:") {
			continue
		}
		if e.o.MaxLinks > 0 && len(e.p.Requisites) >= e.o.MaxLinks {
			e.p.Truncated = true
			return
		}
		e.p.Requisites = append(e.p.Requisites, r)
	}
}

// linksOf takes what tag a says about links: one to follow (a, area,
// frame, iframe), the page's canonical URL or base, or its meta
// directives.
func (e *extractor) linksOf(a atom.Atom, t *tagAttrs) {
	switch a {
	case atom.A, atom.Area:
		e.link(t.href, relNoFollow(t.rel))
	case atom.Link:
		if e.p.Canonical == "" && slices.Contains(strings.Fields(strings.ToLower(t.rel)), "canonical") {
			e.p.Canonical = strings.TrimSpace(t.href)
		}
	case atom.Frame, atom.Iframe:
		e.link(t.src, false)
	case atom.Base:
		if e.p.Base == "" {
			e.p.Base = strings.TrimSpace(t.href)
		}
	case atom.Meta:
		e.p.readMeta(t.metaName, t.metaContent)
	}
}

// link adds a link to follow to Page.Links, until o.MaxLinks.
func (e *extractor) link(raw string, nofollow bool) {
	if raw = strings.TrimSpace(raw); raw == "" {
		return
	}
	if e.o.MaxLinks > 0 && len(e.p.Links) >= e.o.MaxLinks {
		e.p.Truncated = true
		return
	}
	e.p.Links = append(e.p.Links, raw)
	e.p.RelNoFollow = append(e.p.RelNoFollow, nofollow)
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
