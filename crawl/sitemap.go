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
	var sm Sitemap
	var r io.Reader = bytes.NewReader(body)
	if len(body) >= 2 && body[0] == 0x1f && body[1] == 0x8b {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return sm, fmt.Errorf("sitemap: bad gzip: %w", err)
		}
		defer zr.Close()
		r = zr
	}
	limited := &io.LimitedReader{R: r, N: maxBytes}
	dec := xml.NewDecoder(limited)
	dec.Strict = false
	var (
		inLoc, inPriority, inLastMod bool
		parent                       string // "url" or "sitemap"
		loc, prio, lastmod           strings.Builder
		urlAt                        = -1 // index in URLs of the current <url>'s loc
		urlPriority                  = DefaultSitemapPriority
		urlLastMod                   time.Time
	)
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if limited.N <= 0 {
				sm.Truncated = true
				return sm, nil
			}
			if len(sm.URLs)+len(sm.Sitemaps) > 0 {
				return sm, nil // keep what parsed before the break
			}
			return sm, fmt.Errorf("sitemap: %w", err)
		}
		switch t := tok.(type) {
		case xml.StartElement:
			switch t.Name.Local {
			case "url", "sitemap":
				parent = t.Name.Local
				urlAt, urlPriority, urlLastMod = -1, DefaultSitemapPriority, time.Time{}
			case "lastmod":
				inLastMod = true
				lastmod.Reset()
			case "priority":
				inPriority = true
				prio.Reset()
			case "loc":
				inLoc = true
				loc.Reset()
			}
		case xml.CharData:
			if inLoc && loc.Len() < 4096 {
				loc.Write(t)
			}
			if inPriority && prio.Len() < 32 {
				prio.Write(t)
			}
			if inLastMod && lastmod.Len() < 64 {
				lastmod.Write(t)
			}
		case xml.EndElement:
			if t.Name.Local == "lastmod" && inLastMod {
				inLastMod = false
				if at, ok := parseW3CDate(strings.TrimSpace(lastmod.String())); ok {
					urlLastMod = at
					if urlAt >= 0 {
						sm.LastMods[urlAt] = at
					}
				}
				continue
			}
			if t.Name.Local == "priority" && inPriority {
				inPriority = false
				if p, err := strconv.ParseFloat(strings.TrimSpace(prio.String()), 64); err == nil && p >= 0 && p <= 1 {
					urlPriority = p
					if urlAt >= 0 {
						sm.Priorities[urlAt] = p
					}
				}
				continue
			}
			if t.Name.Local != "loc" || !inLoc {
				continue
			}
			inLoc = false
			u := strings.TrimSpace(loc.String())
			if u == "" {
				continue
			}
			if len(sm.URLs)+len(sm.Sitemaps) >= maxEntries {
				sm.Truncated = true
				return sm, nil
			}
			if parent == "sitemap" {
				sm.Sitemaps = append(sm.Sitemaps, u)
			} else {
				urlAt = len(sm.URLs)
				sm.URLs = append(sm.URLs, u)
				sm.Priorities = append(sm.Priorities, urlPriority)
				sm.LastMods = append(sm.LastMods, urlLastMod)
			}
		}
	}
	return sm, nil
}
