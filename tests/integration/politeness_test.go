package integration

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/tests/harness"
	"github.com/spiderpool/spiderpool/tests/synthweb"
)

func robotsFile(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, body)
	}
}

// gaps returns the gaps between consecutive requests.
func gaps(log []synthweb.Request) []time.Duration {
	var out []time.Duration
	for i := 1; i < len(log); i++ {
		out = append(out, log[i].At.Sub(log[i-1].At))
	}
	return out
}

// TestCrawlDelayHoldsAcrossNodesAndReweight: a host with Crawl-delay: 1 is
// crawled by three nodes and moved to another node mid-crawl by a reweight;
// no two requests to it come closer than a second, by the server's clock.
func TestCrawlDelayHoldsAcrossNodesAndReweight(t *testing.T) {
	web := harness.StartWeb(t, synthweb.Config{
		Hosts: 6, Pages: 6 * 14, LinksPerPage: 3, CrossHostFraction: 0.3, Seed: 21,
		Custom: map[int]map[string]http.HandlerFunc{1: {"/robots.txt": robotsFile("User-agent: *\nCrawl-delay: 1\n")}},
	})
	slow := web.Hosts()[1]
	s := harness.NewStack(t)
	s.StartNode("a", 1)
	s.StartNode("b", 1)
	s.StartNode("c", 1)
	id := "crawl-delay-" + s.Name
	spec := loopbackSpec(web)
	spec.Dispatch.BatchSize = 5
	run, err := s.Campaigns.Start(bg, id, spec)
	if err != nil {
		t.Fatal(err)
	}
	// Once the slow host has had a few requests, take its node out of the
	// ring, so a second node takes the host over mid-crawl.
	harness.Eventually(t, time.Minute, "slow host to get requests", func() bool { return len(web.Log(slow)) >= 5 })
	var owner string
	harness.Eventually(t, time.Minute, "the slow host's first page record", func() bool {
		return s.Store.Pool().QueryRow(bg, `SELECT p.node FROM pages p JOIN frontier f ON f.id = p.url_id
			WHERE f.shard_key = $1 LIMIT 1`, slow).Scan(&owner) == nil
	})
	if _, err := s.Campaigns.Reweight(bounded(t, time.Minute), id, owner, 0); err != nil {
		t.Fatal(err)
	}
	var sum campaign.Summary
	if err := run.Get(bounded(t, 3*time.Minute), &sum); err != nil {
		t.Fatal(err)
	}
	assertExactlyOnce(t, s, web, sum)

	log := web.Log(slow)
	minGap := time.Hour
	for _, g := range gaps(log) {
		minGap = min(minGap, g)
	}
	nodes := s.Strings(`SELECT DISTINCT p.node FROM pages p JOIN frontier f ON f.id = p.url_id WHERE f.shard_key = $1`, slow)
	t.Logf("slow host: %d requests (robots.txt included) by nodes %v; smallest gap %v", len(log), nodes, minGap)
	if minGap < time.Second {
		t.Fatalf("two requests to the Crawl-delay: 1 host came %v apart", minGap)
	}
	if len(nodes) < 2 {
		t.Fatalf("the slow host was fetched by %v only; the reweight should have moved it", nodes)
	}
}

// TestRobotsAndRetryAfterHoldRequestsBack: disallowed paths are never
// requested, a host whose robots.txt answers 500 is not crawled until it
// recovers, and a 429 with Retry-After: 2 pauses its host at least 2s.
func TestRobotsAndRetryAfterHoldRequestsBack(t *testing.T) {
	var (
		mu          sync.Mutex
		robots500   = 3 // the first robots.txt requests of host 2 fail
		sent429     bool
		retryAfter  = 2 * time.Second
		disallowing = robotsFile("User-agent: spiderpool\nDisallow: /p/\n\nUser-agent: *\nDisallow:\n")
	)
	web := harness.StartWeb(t, synthweb.Config{
		Hosts: 4, Pages: 4 * 15, LinksPerPage: 3, CrossHostFraction: 0.5, Seed: 5,
		// Host 3 answers its first page request after the root with a 429.
		Intercept: map[int]func(http.ResponseWriter, *http.Request) bool{3: func(w http.ResponseWriter, r *http.Request) bool {
			mu.Lock()
			defer mu.Unlock()
			if sent429 || !strings.HasPrefix(r.URL.Path, "/p/") {
				return false
			}
			sent429 = true
			w.Header().Set("Retry-After", "2")
			http.Error(w, "slow down", http.StatusTooManyRequests)
			return true
		}},
		Custom: map[int]map[string]http.HandlerFunc{
			1: {"/robots.txt": disallowing},
			2: {"/robots.txt": func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				fail := robots500 > 0
				robots500--
				mu.Unlock()
				if fail {
					http.Error(w, "down", http.StatusInternalServerError)
					return
				}
				fmt.Fprint(w, "User-agent: *\nAllow: /\n")
			}},
		},
	})
	host1, host2, host3 := web.Hosts()[1], web.Hosts()[2], web.Hosts()[3]
	s := harness.NewStack(t)
	s.StartNode("a", 1)
	s.StartNode("b", 1)
	spec := loopbackSpec(web)
	// One request at a time per host: a pause can only hold requests not
	// yet sent, so this makes "the next request" unambiguous.
	spec.Politeness.MaxConcurrencyPerHost = 1
	spec.Politeness.RobotsRetry = campaign.Duration(time.Second)
	spec.Retry.InitialInterval = campaign.Duration(50 * time.Millisecond)
	sum := harness.RunCampaign(t, s, "robots-"+s.Name, spec, 3*time.Minute)

	// Host 1: only its root and robots.txt were requested; its /p/ pages
	// are excluded, with the reason.
	for _, r := range web.Log(host1) {
		if strings.HasPrefix(r.Path, "/p/") {
			t.Errorf("disallowed %s was requested", r.Path)
		}
	}
	var excluded int
	if err := s.Store.Pool().QueryRow(bg, `SELECT count(*) FROM frontier WHERE shard_key = $1 AND state = 'excluded'
		AND last_error LIKE 'robots.txt disallows it for spiderpool'`, host1).Scan(&excluded); err != nil {
		t.Fatal(err)
	}
	if excluded == 0 {
		t.Error("no URL of host 1 recorded as excluded by robots.txt")
	}

	// Host 2: no page request before robots.txt first answered 200.
	log2 := web.Log(host2)
	okAt := slices.IndexFunc(log2, func(r synthweb.Request) bool { return r.Path == "/robots.txt" && r.Status == 200 })
	if okAt < 0 {
		t.Fatalf("host 2's robots.txt never recovered: %+v", log2)
	}
	for _, r := range log2[:okAt] {
		if r.Path != "/robots.txt" {
			t.Fatalf("host 2 page %s requested while its robots.txt answered 500", r.Path)
		}
	}
	fetched2 := 0
	for _, r := range log2[okAt+1:] {
		if r.Status == 200 {
			fetched2++
		}
	}
	t.Logf("host 2: robots.txt failed %d times, then %d pages fetched", okAt, fetched2)
	if okAt < 3 || fetched2 == 0 {
		t.Fatalf("host 2: %d failed robots.txt requests before it recovered, %d pages after", okAt, fetched2)
	}

	// Host 3: the request after the 429 came no sooner than Retry-After.
	log3 := web.Log(host3)
	at := slices.IndexFunc(log3, func(r synthweb.Request) bool { return r.Status == http.StatusTooManyRequests })
	if at < 0 || at == len(log3)-1 {
		t.Fatalf("host 3 log %+v: want a 429 and requests after it", log3)
	}
	pause := log3[at+1].At.Sub(log3[at].At)
	t.Logf("host 3: paused %v after a 429 with Retry-After: 2", pause)
	if pause < retryAfter {
		t.Fatalf("host 3 was asked again %v after its 429 with Retry-After: 2", pause)
	}
	if sum.Failed != 0 || sum.Pending != 0 {
		t.Fatalf("summary %+v", sum)
	}
}

// TestSitemapsAddSeeds: with sitemaps enabled, pages no link reaches are
// found through robots.txt's Sitemap line, a sitemap index and a gzipped
// urlset.
func TestSitemapsAddSeeds(t *testing.T) {
	var web *synthweb.Web
	orphan := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "<title>orphan</title>")
	}
	web = harness.StartWeb(t, synthweb.Config{
		Hosts: 1, Pages: 5, LinksPerPage: 1, Seed: 3,
		Custom: map[int]map[string]http.HandlerFunc{0: {
			"/robots.txt": func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprintf(w, "User-agent: *\nAllow: /\nSitemap: http://%s/sitemap_index.xml\n", r.Host)
			},
			"/sitemap_index.xml": func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprintf(w, `<?xml version="1.0"?><sitemapindex><sitemap><loc>http://%s/sm1.xml.gz</loc></sitemap></sitemapindex>`, r.Host)
			},
			"/sm1.xml.gz": func(w http.ResponseWriter, r *http.Request) {
				var b strings.Builder
				b.WriteString(`<urlset>`)
				for i := range 5 {
					fmt.Fprintf(&b, "<url><loc>http://%s/orphan/%d</loc></url>", r.Host, i)
				}
				b.WriteString(`</urlset>`)
				w.Header().Set("Content-Type", "application/gzip")
				w.Write(harness.Gzipped(b.String()))
			},
			"/orphan/": orphan,
		}},
	})
	s := harness.NewStack(t)
	s.StartNode("a", 1)
	spec := loopbackSpec(web)
	spec.Sitemaps.Enabled = true
	sum := harness.RunCampaign(t, s, "sitemaps-"+s.Name, spec, time.Minute)
	hits := web.Hits()
	for i := range 5 {
		u := fmt.Sprintf("http://%s/orphan/%d", web.Hosts()[0], i)
		if hits[u] != 1 {
			t.Errorf("%s requested %d times, want once (found through the sitemap)", u, hits[u])
		}
	}
	if sum.Fetched != 10 {
		t.Errorf("fetched %d, want the 5 linked pages and the 5 from the sitemap", sum.Fetched)
	}
}
