package warc

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nlnwa/gowarc/v3"

	"github.com/spiderpool/spiderpool/archive"
	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/config"
	"github.com/spiderpool/spiderpool/store"
	"github.com/spiderpool/spiderpool/tests/harness"
)

// countingSite serves files by path and counts the requests for each.
type countingSite struct {
	mu    sync.Mutex
	hits  map[string]int
	files map[string]file
}

type file struct {
	contentType string
	body        string
}

func (c *countingSite) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	c.hits[r.URL.RequestURI()]++
	c.mu.Unlock()
	f, ok := c.files[r.URL.Path]
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", f.contentType)
	fmt.Fprint(w, f.body)
}

func (c *countingSite) Hits() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for k, v := range c.hits {
		out[k] = v
	}
	return out
}

// requisiteSite is two pages using images (src, srcset, picture), CSS
// (with url() and @import, fonts, a relative url), a script, a style
// attribute and a <style> element; some requisites shared by both pages,
// one behind robots.txt, some on a host the scope does not take.
func requisiteSite(other string) *countingSite {
	png := func(name string) file { return file{"image/png", "\x89PNG\r\n\x1a\n" + name} }
	return &countingSite{hits: map[string]int{}, files: map[string]file{
		"/robots.txt": {"text/plain", "User-agent: *\nDisallow: /private/\n"},
		"/": {"text/html", `<!doctype html><html><head><title>home</title>
<link rel="stylesheet" href="/css/site.css"><script src="/js/app.js"></script>
<link rel="icon" href="/favicon.png"><link rel="prefetch" href="/a.html">
<style>h2 { background: url("/img/inline.png") }</style></head>
<body><img src="/img/logo.png" srcset="/img/logo-1x.png 1x, /img/logo-2x.png 2x">
<picture><source srcset="/img/pic.webp 1x" type="image/webp"><img src="img/pic.png"></picture>
<div style="background-image:url(/img/div.png)"></div>
<img src="/private/secret.png"><img src="http://` + other + `/img/outside.png"><img src="data:image/gif;base64,R0lGODlhAQABAAAAACw=">
<a href="/a.html">a</a></body></html>`},
		"/a.html": {"text/html", `<!doctype html><html><head><title>a</title><link rel="stylesheet" href="/css/site.css"></head>
<body><img src="/img/logo.png"><img src="/img/a-only.png"></body></html>`},
		"/css/site.css": {"text/css", `@import "base.css";
body { background: url(../img/bg.png) }
@font-face { font-family: F; src: url(/fonts/f.woff2) format("woff2"), url("http://` + other + `/fonts/outside.woff") }
/* url(/img/commented.png) */`},
		"/css/base.css":       {"text/css", `h1 { background: url('/img/h1.png') }`},
		"/js/app.js":          {"application/javascript", `document.title += "!"`},
		"/fonts/f.woff2":      {"font/woff2", "wOF2font"},
		"/favicon.png":        png("favicon"),
		"/img/inline.png":     png("inline"),
		"/img/logo.png":       png("logo"),
		"/img/logo-1x.png":    png("logo-1x"),
		"/img/logo-2x.png":    png("logo-2x"),
		"/img/pic.webp":       {"image/webp", "RIFFpic"},
		"/img/pic.png":        png("pic"),
		"/img/div.png":        png("div"),
		"/img/a-only.png":     png("a-only"),
		"/img/bg.png":         png("bg"),
		"/img/h1.png":         png("h1"),
		"/private/secret.png": png("secret"),
	}}
}

// TestRequisitesArchivedOnceApartFromPages: with scope.requisites on, every
// requisite of a site whose pages use images (src, srcset, picture), CSS
// (url(), @import, fonts), scripts and inline styles is fetched and
// archived exactly once, counted apart from pages; robots.txt holds for
// them, and nothing outside scope is asked for.
func TestRequisitesArchivedOnceApartFromPages(t *testing.T) {
	outside := &countingSite{hits: map[string]int{}, files: map[string]file{}}
	otherSrv := startWireServer(t, outside)
	site := requisiteSite(otherSrv.Host)
	srv := startWireServer(t, site)
	s := harness.NewStack(t)
	warcDir := t.TempDir()
	node := s.StartNodeWith("a", 1, func(c *config.Config) { c.Node.WARCDir = warcDir })
	id := "requisites-" + s.Name
	spec := campaign.Spec{
		Seeds: []string{"http://" + srv.Host + "/"},
		Scope: campaign.Scope{Hosts: []string{srv.Host}, Requisites: true},
	}
	start := time.Now()
	sum := harness.RunCampaign(t, s, id, spec, 2*time.Minute)
	took := time.Since(start)
	s.StopNode(node)

	pages := []string{"/", "/a.html"}
	requisites := []string{"/css/site.css", "/css/base.css", "/js/app.js", "/fonts/f.woff2", "/favicon.png",
		"/img/inline.png", "/img/logo.png", "/img/logo-1x.png", "/img/logo-2x.png", "/img/pic.webp", "/img/pic.png",
		"/img/div.png", "/img/a-only.png", "/img/bg.png", "/img/h1.png"}
	hits := site.Hits()
	for _, p := range append(slices.Clone(pages), requisites...) {
		if hits[p] != 1 {
			t.Errorf("%s requested %d times, want once", p, hits[p])
		}
	}
	for p, n := range hits {
		if p != "/robots.txt" && !slices.Contains(pages, p) && !slices.Contains(requisites, p) {
			t.Errorf("%s requested %d times; it is no page or requisite in scope", p, n)
		}
	}
	if n := len(outside.Hits()); n != 0 {
		t.Errorf("the host out of scope got requests: %v", outside.Hits())
	}

	key, err := s.Store.CampaignKey(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	kinds, err := s.Store.CountKinds(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if p, r := kinds[store.KindPage], kinds[store.KindRequisite]; p.Fetched != int64(len(pages)) || r.Fetched != int64(len(requisites)) || r.Excluded != 1 || p.Pending+r.Pending != 0 {
		t.Errorf("counted by kind: pages %+v, requisites %+v; want %d pages and %d requisites fetched, the robots.txt one excluded",
			p, r, len(pages), len(requisites))
	}
	var excluded []string
	for _, u := range s.Strings(`SELECT url FROM frontier WHERE kind = 'requisite' AND state = 'excluded' AND last_error LIKE 'robots.txt%'`) {
		excluded = append(excluded, strings.TrimPrefix(u, "http://"+srv.Host))
	}
	if !slices.Equal(excluded, []string{"/private/secret.png"}) {
		t.Errorf("requisites excluded by robots.txt: %v", excluded)
	}

	archived := map[string]int{}
	err = archive.ReadDir(archive.CampaignDir(warcDir, id), func(file string, wr gowarc.WarcRecord, problems []error) error {
		if len(problems) > 0 {
			t.Errorf("%s: %v", file, problems)
		}
		if wr.Type() == gowarc.Response || wr.Type() == gowarc.Revisit {
			archived[strings.TrimPrefix(wr.WarcHeader().Get(gowarc.WarcTargetURI), "http://"+srv.Host)]++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range append(slices.Clone(pages), requisites...) {
		if archived[p] != 1 {
			t.Errorf("%s archived %d times, want once", p, archived[p])
		}
	}
	var paths []string
	for p := range archived {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	t.Logf("crawl %v: summary fetched %d; by kind pages %+v, requisites %+v; archived %d URIs %v",
		took.Round(time.Millisecond), sum.Fetched, kinds[store.KindPage], kinds[store.KindRequisite], len(paths), paths)
}
