// Package integration crawls synthetic webs with the whole stack, for real:
// the Temporal dev server, Postgres, and nodes wired as in production.
package integration

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/ring"
	"github.com/spiderpool/spiderpool/tests/harness"
	"github.com/spiderpool/spiderpool/tests/synthweb"
)

func TestMain(m *testing.M) { harness.Main(m) }

var bg = context.Background()

// loopbackSpec crawls everything on 127.0.0.1 from the web's seed.
func loopbackSpec(web *synthweb.Web) campaign.Spec {
	return campaign.Spec{
		Seeds:      []string{web.Seed()},
		Scope:      campaign.Scope{AllowedDomains: []string{"127.0.0.1"}},
		Politeness: campaign.Politeness{MaxConcurrencyPerHost: 4},
	}
}

// bounded is a context for a wait on a campaign (its result, the answer to
// an update): one that never comes fails the test at the deadline instead of
// hanging the package until go test's -timeout.
func bounded(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(bg, d)
	t.Cleanup(cancel)
	return ctx
}

// assertExactlyOnce checks the invariants against the server's access log
// and Postgres: every page fetched exactly once (a page that answers 503
// first is requested once more per 503), nothing else requested but the
// dead links (once each), and the frontier's fetched rows are the pages
// rows.
func assertExactlyOnce(t *testing.T, s *harness.Stack, web *synthweb.Web, sum campaign.Summary) {
	t.Helper()
	hits := web.Hits()
	pages := web.Pages()
	var missing, twice []string
	for _, p := range pages {
		switch n := hits[p]; {
		case n == 0:
			missing = append(missing, p)
		case n > web.ExpectedHits(p):
			twice = append(twice, p)
		}
	}
	dead := map[string]bool{}
	for _, d := range web.DeadLinks() {
		dead[d] = true
		if hits[d] != 1 {
			t.Errorf("dead link %s requested %d times, want 1", d, hits[d])
		}
	}
	for u, n := range hits {
		if strings.HasSuffix(u, "/robots.txt") {
			if n != 1 {
				t.Errorf("%s requested %d times, want once per host", u, n)
			}
			continue
		}
		if !dead[u] && !slices.Contains(pages, u) {
			t.Errorf("requested %s, which no page links to", u)
		}
	}
	if len(missing) > 0 || len(twice) > 0 {
		t.Fatalf("%d of %d pages never fetched (e.g. %v), %d fetched more than once (e.g. %v)",
			len(missing), len(pages), head(missing), len(twice), head(twice))
	}
	if sum.Fetched != int64(len(pages)) || sum.Pages != sum.Fetched || sum.Failed != int64(len(dead)) ||
		sum.Pending != 0 || sum.Leased != 0 || sum.URLs != int64(len(pages)+len(dead)) {
		t.Fatalf("summary %+v: want %d fetched = pages, %d failed (dead links), nothing pending or leased",
			sum, len(pages), len(dead))
	}
	var fetchedRows, pageRows int64
	if err := s.Store.Pool().QueryRow(bg, `SELECT
		(SELECT count(*) FROM frontier WHERE state = 'fetched'), (SELECT count(*) FROM pages)`).Scan(&fetchedRows, &pageRows); err != nil {
		t.Fatal(err)
	}
	if fetchedRows != pageRows || pageRows != int64(len(pages)) {
		t.Fatalf("frontier has %d fetched rows and pages %d rows; want both %d", fetchedRows, pageRows, len(pages))
	}
}

func head(s []string) []string {
	if len(s) > 3 {
		return s[:3]
	}
	return s
}

// TestCrawlFetchesEveryPageExactlyOnce: 3,000 pages over 24 hosts, three
// nodes weighted 1, 1, 2.
func TestCrawlFetchesEveryPageExactlyOnce(t *testing.T) {
	web := harness.StartWeb(t, synthweb.Config{
		Hosts: 24, Pages: 3000, LinksPerPage: 8, CrossHostFraction: 0.3, Seed: 7,
		DeadLinkFraction: 0.02, TransientFraction: 0.03, TransientAttempts: 1,
	})
	s := harness.NewStack(t)
	a, b, c := s.StartNode("a", 1), s.StartNode("b", 1), s.StartNode("c", 2)
	spec := loopbackSpec(web)
	spec.Retry = campaign.Retry{InitialInterval: campaign.Duration(50 * time.Millisecond)}
	start := time.Now()
	sum := harness.RunCampaign(t, s, "exactly-once-"+s.Name, spec, 3*time.Minute)
	elapsed := time.Since(start)
	assertExactlyOnce(t, s, web, sum)

	// Each host's pages were fetched by its owner under the ring.
	r := ring.New(ring.Node{ID: a, Weight: 1}, ring.Node{ID: b, Weight: 1}, ring.Node{ID: c, Weight: 2})
	rows, err := s.Store.Pool().Query(bg, `SELECT DISTINCT f.shard_key, p.node FROM pages p JOIN frontier f ON f.id = p.url_id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	owners := map[string]int{}
	for rows.Next() {
		var key, node string
		if err := rows.Scan(&key, &node); err != nil {
			t.Fatal(err)
		}
		if want, _ := r.Lookup(key); node != want {
			t.Errorf("host %s fetched by %s, ring owner is %s", key, node, want)
		}
		owners[node]++
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("pages per host: %v", err)
	}
	harness.RecordHistory(t, s.Client, "exactly-once-"+s.Name, "exactly_once")
	t.Logf("%d pages over %d hosts in %v (%.0f pages/s); per node %v; hosts per node %v; %d requests",
		sum.Fetched, len(web.Hosts()), elapsed.Round(time.Millisecond), float64(sum.Fetched)/elapsed.Seconds(),
		sum.PerNode, owners, web.Requests())
}
