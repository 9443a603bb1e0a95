package archive

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/nlnwa/gowarc/v3"
)

// TestAScreenshotIsAResourceRecordAPackageIndexes: a page's screenshots
// are resource records of their own URIs, with their media types and
// bytes as given, that read back valid; a WACZ indexes them at the page's
// timestamp with their media types, and lists the page alone as a page.
func TestAScreenshotIsAResourceRecordAPackageIndexes(t *testing.T) {
	dir := t.TempDir()
	w, err := Open(dir, "n1", 0)
	if err != nil {
		t.Fatal(err)
	}
	pg := exchange(1, page(1))
	write(t, w, nil, pg)
	shots := []Resource{
		{URI: "urn:view:" + pg.URL, Date: pg.Date, ContentType: "image/png", Body: []byte("\x89PNG\r\n\x1a\n a picture")},
		{URI: "urn:thumbnail:" + pg.URL, Date: pg.Date, ContentType: "image/jpeg", Body: []byte("\xff\xd8\xff a smaller one")},
	}
	if err := errors.Join(w.WriteResources(testCampaign, shots)...); err != nil {
		t.Fatal(err)
	}
	w.Close()

	byURI := map[string]got{}
	for _, g := range readAll(t, dir) {
		byURI[g.header.Get(gowarc.WarcTargetURI)] = g
	}
	for _, s := range shots {
		g, ok := byURI[s.URI]
		if !ok || g.typ != gowarc.Resource || g.header.Get(gowarc.ContentType) != s.ContentType || !bytes.Equal(g.block, s.Body) {
			t.Errorf("%s: read back as %v %s %q; want a resource record of %s holding %q", s.URI, g.typ, g.header.Get(gowarc.ContentType), g.block, s.ContentType, s.Body)
		}
		if g.header != nil && g.header.Get(gowarc.WarcDate) != byURI[pg.URL].header.Get(gowarc.WarcDate) {
			t.Errorf("%s: WARC-Date %s, the page's %s", s.URI, g.header.Get(gowarc.WarcDate), byURI[pg.URL].header.Get(gowarc.WarcDate))
		}
	}

	files, err := Files(dir)
	if err != nil {
		t.Fatal(err)
	}
	var pkg bytes.Buffer
	sum, err := WriteWACZ(&pkg, files, WACZOptions{Title: "c1", Pages: []WACZPage{{URL: pg.URL}}})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Records != 3 || sum.Pages != 1 {
		t.Errorf("summary %+v; want 3 records (the page, its two pictures), 1 page", sum)
	}
	got := unzip(t, pkg.Bytes())
	mimes := map[string]string{}
	stamps := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(got["indexes/index.cdxj"])), "\n") {
		_, rest, _ := strings.Cut(line, " ")
		ts, js, _ := strings.Cut(rest, " ")
		var e CDXJEntry
		if err := json.Unmarshal([]byte(js), &e); err != nil {
			t.Fatalf("index line %q: %v", line, err)
		}
		mimes[e.URL], stamps[e.URL] = e.Mime, ts
	}
	for _, s := range shots {
		if mimes[s.URI] != s.ContentType || stamps[s.URI] != stamps[pg.URL] {
			t.Errorf("%s indexed as %q at %q; want %s at the page's %q", s.URI, mimes[s.URI], stamps[s.URI], s.ContentType, stamps[pg.URL])
		}
	}
	if pl := string(got["pages/pages.jsonl"]); strings.Count(pl, "\n") != 2 || strings.Contains(pl, "urn:") {
		t.Errorf("pages.jsonl lists more than the page:\n%s", pl)
	}
}
