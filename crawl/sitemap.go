package crawl

import (
	"bytes"
	"compress/gzip"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// Sitemap is what one sitemap document lists: page URLs (a urlset) or more
// sitemaps (a sitemap index).
type Sitemap struct {
	URLs []string
	// Priorities are the URLs' <priority>, 0.0 to 1.0, by index (0.5, the
	// protocol's default, when a URL gives none or a bad one).
	Priorities []float64
	// LastMods are the URLs' <lastmod> (W3C datetime), by index; zero
	// when a URL gives none or one that does not parse.
	LastMods []time.Time
	Sitemaps []string
	// Truncated is set when the document listed more than the cap.
	Truncated bool
}

// parseW3CDate reads a sitemap <lastmod>: a W3C datetime, from a date
// ("2024-01-31") to seconds with a fraction and a zone.
func parseW3CDate(s string) (time.Time, bool) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04Z07:00", "2006-01-02", "2006-01", "2006"} {
		if at, err := time.Parse(layout, s); err == nil {
			return at, true
		}
	}
	return time.Time{}, false
}

// DefaultSitemapPriority is a sitemap URL's priority when it gives none.
const DefaultSitemapPriority = 0.5

// ParseSitemap reads a sitemap (sitemaps.org protocol), gzipped or not, as
// a stream, keeping at most maxEntries locations and decompressing at most
// maxBytes: a sitemap is as hostile as any page.
func ParseSitemap(body []byte, maxEntries int, maxBytes int64) (Sitemap, error) {
	r, err := sitemapBody(body)
	if err != nil {
		return Sitemap{}, err
	}
	defer r.Close()
	limited := &io.LimitedReader{R: r, N: maxBytes}
	dec := xml.NewDecoder(limited)
	dec.Strict = false
	sp := sitemapParser{maxEntries: maxEntries}
	sp.startEntry("")
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return sp.sm, nil
		}
		if err != nil {
			if limited.N <= 0 {
				sp.sm.Truncated = true
				return sp.sm, nil
			}
			if len(sp.sm.URLs)+len(sp.sm.Sitemaps) > 0 {
				return sp.sm, nil // keep what parsed before the break
			}
			return sp.sm, fmt.Errorf("sitemap: %w", err)
		}
		if full := sp.token(tok); full {
			sp.sm.Truncated = true
			return sp.sm, nil
		}
	}
}

// sitemapBody opens a sitemap, gunzipping it when it starts with gzip's
// magic bytes.
func sitemapBody(body []byte) (io.ReadCloser, error) {
	r := bytes.NewReader(body)
	if len(body) < 2 || body[0] != 0x1f || body[1] != 0x8b {
		return io.NopCloser(r), nil
	}
	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("sitemap: bad gzip: %w", err)
	}
	return zr, nil
}

// sitemapParser is ParseSitemap's state between tokens. An entry (<url>
// or <sitemap>) may give its <priority> and <lastmod> before or after its
// <loc>, so both are kept for the entry and written to its URL whenever
// they come.
type sitemapParser struct {
	sm         Sitemap
	maxEntries int

	inLoc, inPriority, inLastMod bool
	loc, prio, lastmod           strings.Builder

	parent      string // "url" or "sitemap"
	urlAt       int    // index in URLs of the current <url>'s loc, or -1
	urlPriority float64
	urlLastMod  time.Time
}

// token takes one XML token; full says a location did not fit in
// maxEntries.
func (sp *sitemapParser) token(tok xml.Token) (full bool) {
	switch t := tok.(type) {
	case xml.StartElement:
		sp.start(t.Name.Local)
	case xml.CharData:
		sp.text(t)
	case xml.EndElement:
		switch {
		case t.Name.Local == "lastmod" && sp.inLastMod:
			sp.endLastMod()
		case t.Name.Local == "priority" && sp.inPriority:
			sp.endPriority()
		case t.Name.Local == "loc" && sp.inLoc:
			return sp.endLoc()
		}
	}
	return false
}

// startEntry begins a <url> or <sitemap>, with the protocol's defaults.
func (sp *sitemapParser) startEntry(parent string) {
	sp.parent = parent
	sp.urlAt, sp.urlPriority, sp.urlLastMod = -1, DefaultSitemapPriority, time.Time{}
}

func (sp *sitemapParser) start(name string) {
	switch name {
	case "url", "sitemap":
		sp.startEntry(name)
	case "lastmod":
		sp.inLastMod = true
		sp.lastmod.Reset()
	case "priority":
		sp.inPriority = true
		sp.prio.Reset()
	case "loc":
		sp.inLoc = true
		sp.loc.Reset()
	}
}

// text collects the text of the open element, each kept to a length no
// valid value exceeds.
func (sp *sitemapParser) text(t xml.CharData) {
	if sp.inLoc && sp.loc.Len() < 4096 {
		sp.loc.Write(t)
	}
	if sp.inPriority && sp.prio.Len() < 32 {
		sp.prio.Write(t)
	}
	if sp.inLastMod && sp.lastmod.Len() < 64 {
		sp.lastmod.Write(t)
	}
}

// endLastMod keeps a <lastmod> that parses; one that does not is ignored.
func (sp *sitemapParser) endLastMod() {
	sp.inLastMod = false
	if at, ok := parseW3CDate(strings.TrimSpace(sp.lastmod.String())); ok {
		sp.urlLastMod = at
		if sp.urlAt >= 0 {
			sp.sm.LastMods[sp.urlAt] = at
		}
	}
}

// endPriority keeps a <priority> in 0..1; any other is ignored.
func (sp *sitemapParser) endPriority() {
	sp.inPriority = false
	if p, err := strconv.ParseFloat(strings.TrimSpace(sp.prio.String()), 64); err == nil && p >= 0 && p <= 1 {
		sp.urlPriority = p
		if sp.urlAt >= 0 {
			sp.sm.Priorities[sp.urlAt] = p
		}
	}
}

// endLoc adds a location to URLs or Sitemaps; full says it did not fit in
// maxEntries.
func (sp *sitemapParser) endLoc() (full bool) {
	sp.inLoc = false
	u := strings.TrimSpace(sp.loc.String())
	if u == "" {
		return false
	}
	if len(sp.sm.URLs)+len(sp.sm.Sitemaps) >= sp.maxEntries {
		return true
	}
	if sp.parent == "sitemap" {
		sp.sm.Sitemaps = append(sp.sm.Sitemaps, u)
	} else {
		sp.urlAt = len(sp.sm.URLs)
		sp.sm.URLs = append(sp.sm.URLs, u)
		sp.sm.Priorities = append(sp.sm.Priorities, sp.urlPriority)
		sp.sm.LastMods = append(sp.sm.LastMods, sp.urlLastMod)
	}
	return false
}
