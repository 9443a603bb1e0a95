package crawl

import (
	"bytes"
	"compress/gzip"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Sitemap is what one sitemap document lists: page URLs (a urlset) or more
// sitemaps (a sitemap index).
type Sitemap struct {
	URLs     []string
	Sitemaps []string
	// Truncated is set when the document listed more than the cap.
	Truncated bool
}

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
		inLoc  bool
		parent string // "url" or "sitemap"
		loc    strings.Builder
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
			case "loc":
				inLoc = true
				loc.Reset()
			}
		case xml.CharData:
			if inLoc && loc.Len() < 4096 {
				loc.Write(t)
			}
		case xml.EndElement:
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
				sm.URLs = append(sm.URLs, u)
			}
		}
	}
	return sm, nil
}
