// Package warc tests archiving end to end: a crawl of a synthetic site,
// with the whole stack, whose WARC files are read back by an independent
// reader (webrecorder's warcio.js, installed with npm) and held against the
// bytes the site's server wrote on its connections.
package warc

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/archive"
	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/config"
	"github.com/spiderpool/spiderpool/tests/harness"
)

func TestMain(m *testing.M) { harness.Main(m) }

const maxBody = 64 << 10

// samePayload is served at two URLs.
var samePayload = []byte("<!doctype html><html><head><title>twin</title></head><body>" + strings.Repeat("<p>identical</p>", 50) + "</body></html>")

func html(title string, links ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "<!doctype html><html><head><title>%s</title></head><body>", title)
	for _, l := range links {
		fmt.Fprintf(&b, `<a href="%s">%s</a>`, l, l)
	}
	b.WriteString("</body></html>")
	return b.String()
}

// exchangeSite serves what an archive must hold faithfully: a gzip-encoded
// page, a chunked page, two URLs with the same bytes, a 404, a page past
// the body cap, and robots.txt naming a sitemap.
func exchangeSite(host *string) http.Handler {
	mux := http.NewServeMux()
	page := func(path, body string) {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Write([]byte(body))
		})
	}
	page("/{$}", html("root", "/gzip.html", "/chunked.html", "/same-a.html", "/same-b.html", "/missing.html", "/big.html"))
	mux.HandleFunc("/robots.txt", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "User-agent: *\nAllow: /\nSitemap: http://%s/sitemap.xml\n", *host)
	})
	mux.HandleFunc("/sitemap.xml", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/xml")
		fmt.Fprintf(w, `<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"><url><loc>http://%s/from-sitemap.html</loc></url></urlset>`, *host)
	})
	page("/from-sitemap.html", html("from the sitemap"))
	mux.HandleFunc("/gzip.html", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("Vary", "Accept-Encoding")
		w.Write(harness.Gzipped(html("gzip", "/behind-gzip.html")))
	})
	page("/behind-gzip.html", html("linked from inside gzip"))
	mux.HandleFunc("/chunked.html", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		body := html("chunked", "/behind-chunked.html")
		// Flushing part-way makes net/http send Transfer-Encoding: chunked.
		w.Write([]byte(body[:40]))
		w.(http.Flusher).Flush()
		w.Write([]byte(body[40:]))
	})
	page("/behind-chunked.html", html("linked from inside chunks"))
	for _, p := range []string{"/same-a.html", "/same-b.html"} {
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.Write(samePayload)
		})
	}
	mux.HandleFunc("/big.html", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("Content-Length", fmt.Sprint(4*maxBody))
		w.Write(bytes.Repeat([]byte("b"), 4*maxBody))
	})
	return mux
}

// TestArchivedBytesAreTheBytesSent: every record of a crawl's WARC files is
// read back by warcio.js; for every response record the archived HTTP bytes
// equal the bytes the server wrote, a gzip-encoded and a chunked response
// included, and digests verify; two URLs serving the same bytes give one
// response and one revisit; robots.txt and the sitemap are archived, and a
// warcinfo record names the software and the campaign's spec.
func TestArchivedBytesAreTheBytesSent(t *testing.T) {
	start := time.Now()
	var host string
	srv := startWireServer(t, exchangeSite(&host))
	host = srv.Host
	s := harness.NewStack(t)
	warcDir := t.TempDir()
	node := s.StartNodeWith("a", 1, func(c *config.Config) { c.Node.WARCDir = warcDir })
	id := "warc-bytes-" + s.Name
	spec := campaign.Spec{
		Seeds:    []string{"http://" + host + "/"},
		Scope:    campaign.Scope{Hosts: []string{host}},
		Limits:   campaign.Limits{MaxBodyBytes: maxBody},
		Sitemaps: campaign.Sitemaps{Enabled: true},
	}
	sum := harness.RunCampaign(t, s, id, spec, 2*time.Minute)
	s.StopNode(node) // closes its WARC files
	crawled := time.Since(start)

	sent := map[string]served{}
	for _, ex := range srv.Exchanges(t) {
		if _, twice := sent[ex.Path]; twice {
			t.Errorf("%s was requested twice", ex.Path)
		}
		sent[ex.Path] = ex
	}
	// The test proves nothing unless the server really sent these.
	if !bytes.Contains(sent["/gzip.html"].Response, []byte("\r\nContent-Encoding: gzip\r\n")) ||
		!bytes.Contains(sent["/chunked.html"].Response, []byte("\r\nTransfer-Encoding: chunked\r\n")) ||
		sent["/robots.txt"].Response == nil || sent["/sitemap.xml"].Response == nil || sent["/behind-gzip.html"].Response == nil ||
		sent["/behind-chunked.html"].Response == nil || sent["/from-sitemap.html"].Response == nil {
		t.Fatalf("the site was not crawled as the test needs: requests %v", keys(sent))
	}

	files, err := archive.Files(archive.CampaignDir(warcDir, id))
	if err != nil {
		t.Fatal(err)
	}
	recs := warcio(t, files...)
	read := time.Since(start) - crawled

	byID := map[string]record{}
	counts := map[string]int{}
	archived := map[string]record{} // path -> response or revisit
	var requests []record
	for _, r := range recs {
		counts[r.Type]++
		byID[r.Get("WARC-Record-ID")] = r
		if r.BlockDigestOK == nil || !*r.BlockDigestOK {
			t.Errorf("%s %s: WARC-Block-Digest %s does not match its block", r.Type, r.Get("WARC-Target-URI"), r.Get("WARC-Block-Digest"))
		}
		switch r.Type {
		case "warcinfo":
			for _, want := range []string{"software: spiderpool/", "isPartOf: " + id, `"campaign-spec":{"seeds":["http://` + host + `/"]`} {
				if !bytes.Contains(r.Block, []byte(want)) {
					t.Errorf("warcinfo %q lacks %q", r.Block, want)
				}
			}
			continue
		case "response", "revisit":
			path := strings.TrimPrefix(r.Get("WARC-Target-URI"), "http://"+host)
			if _, twice := archived[path]; twice {
				t.Errorf("%s archived twice", path)
			}
			archived[path] = r
		case "request":
			requests = append(requests, r)
		default:
			t.Errorf("unexpected %s record", r.Type)
			continue
		}
		if r.Get("WARC-IP-Address") != "127.0.0.1" {
			t.Errorf("%s %s: WARC-IP-Address %q", r.Type, r.Get("WARC-Target-URI"), r.Get("WARC-IP-Address"))
		}
		if r.Type != "revisit" && (r.PayloadDigestOK == nil || !*r.PayloadDigestOK) {
			t.Errorf("%s %s: WARC-Payload-Digest %s does not match its payload", r.Type, r.Get("WARC-Target-URI"), r.Get("WARC-Payload-Digest"))
		}
	}
	if counts["warcinfo"] != len(files) {
		t.Errorf("%d warcinfo records in %d files", counts["warcinfo"], len(files))
	}

	for path, ex := range sent {
		r, ok := archived[path]
		switch {
		case !ok:
			t.Errorf("%s: the server answered, nothing archived", path)
		case path == "/big.html":
			if r.Get("WARC-Truncated") != "length" || !bytes.HasPrefix(ex.Response, r.Block) || len(r.Block) < maxBody {
				t.Errorf("%s: WARC-Truncated %q, %d bytes archived of %d sent; want length, a prefix at least the cap long",
					path, r.Get("WARC-Truncated"), len(r.Block), len(ex.Response))
			}
		case r.Type == "revisit":
			head := ex.Response[:bytes.Index(ex.Response, []byte("\r\n\r\n"))+4]
			if !bytes.Equal(r.Block, head) {
				t.Errorf("%s: revisit block\n%q\nwant the header block sent\n%q", path, r.Block, head)
			}
		case !bytes.Equal(r.Block, ex.Response):
			t.Errorf("%s: archived\n%q\nthe server sent\n%q", path, r.Block, ex.Response)
		}
	}
	for path := range archived {
		if _, ok := sent[path]; !ok {
			t.Errorf("%s is archived but the server never answered it", path)
		}
	}
	for _, req := range requests {
		path := strings.TrimPrefix(req.Get("WARC-Target-URI"), "http://"+host)
		if !bytes.Equal(req.Block, sent[path].Request) {
			t.Errorf("%s: request record\n%q\nthe server read\n%q", path, req.Block, sent[path].Request)
		}
		if to := byID[req.Get("WARC-Concurrent-To")]; to.Get("WARC-Target-URI") != req.Get("WARC-Target-URI") || to.File != req.File {
			t.Errorf("%s: request names %s, not its response in its file", path, req.Get("WARC-Concurrent-To"))
		}
	}
	if len(requests) != len(sent) {
		t.Errorf("%d request records for %d requests", len(requests), len(sent))
	}

	// warcio decodes what was kept coded: the page comes out of the gzip
	// and out of the chunks.
	if got := string(archived["/gzip.html"].Content); got != html("gzip", "/behind-gzip.html") {
		t.Errorf("warcio's content of the gzip record: %q", got)
	}
	if got := string(archived["/chunked.html"].Content); got != html("chunked", "/behind-chunked.html") {
		t.Errorf("warcio's content of the chunked record: %q", got)
	}

	a, b := archived["/same-a.html"], archived["/same-b.html"]
	orig, rv := a, b
	if a.Type == "revisit" {
		orig, rv = b, a
	}
	if orig.Type != "response" || rv.Type != "revisit" {
		t.Fatalf("same bytes at two URLs: %s and %s records; want one response, one revisit", a.Type, b.Type)
	}
	if rv.Get("WARC-Profile") != "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest" ||
		rv.Get("WARC-Refers-To") != orig.Get("WARC-Record-ID") ||
		rv.Get("WARC-Refers-To-Target-URI") != orig.Get("WARC-Target-URI") ||
		rv.Get("WARC-Refers-To-Date") != orig.Get("WARC-Date") ||
		rv.Get("WARC-Payload-Digest") != orig.Get("WARC-Payload-Digest") {
		t.Errorf("revisit %v does not point at the response %v", rv.Headers, orig.Headers)
	}
	var rows int
	if err := s.Store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM archived_payloads`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	t.Logf("crawl %v (%d fetched, %d failed), warcio read %d records in %d file(s) in %v: %v; payload index %d rows",
		crawled.Round(time.Millisecond), sum.Fetched, sum.Failed, len(recs), len(files), read.Round(time.Millisecond), counts, rows)
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
