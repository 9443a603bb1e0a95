package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nlnwa/gowarc/v3"
	dto "github.com/prometheus/client_model/go"

	"github.com/spiderpool/spiderpool/archive"
	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/config"
	"github.com/spiderpool/spiderpool/devstack"
	"github.com/spiderpool/spiderpool/tests/harness"
	"github.com/spiderpool/spiderpool/tests/synthweb"
)

// warcRecords counts response and request records per target URI in
// every WARC file of dir, each record read back with strict validation.
func warcRecords(t *testing.T, dir string) (responses, requests map[string]int, files int) {
	t.Helper()
	paths, err := archive.Files(dir)
	if err != nil {
		t.Fatal(err)
	}
	responses, requests = map[string]int{}, map[string]int{}
	for _, path := range paths {
		if strings.HasSuffix(path, ".open") {
			t.Errorf("%s still open after its node stopped", path)
		}
	}
	err = archive.ReadDir(dir, func(file string, wr gowarc.WarcRecord, problems []error) error {
		if len(problems) > 0 {
			t.Errorf("%s: %v", file, problems)
		}
		uri := wr.WarcHeader().Get(gowarc.WarcTargetURI)
		if strings.HasSuffix(uri, "/robots.txt") {
			return nil // archived too, but not a page
		}
		switch wr.Type() {
		case gowarc.Response, gowarc.Revisit:
			// Every answer is archived (a 503 before its retry, a 404);
			// a page is its 200, in full or as a revisit of an identical
			// payload.
			if archivedStatus(t, uri, wr) == 200 {
				responses[uri]++
			}
		case gowarc.Request:
			requests[uri]++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return responses, requests, len(paths)
}

// archivedStatus is the HTTP status of a response or revisit record.
func archivedStatus(t *testing.T, uri string, wr gowarc.WarcRecord) int {
	t.Helper()
	if hb, ok := wr.Block().(gowarc.HttpResponseBlock); ok {
		return hb.HttpStatusCode()
	}
	if pb, ok := wr.Block().(interface{ ProtocolHeaderBytes() []byte }); ok {
		var proto string
		var status int
		if _, err := fmt.Sscanf(string(pb.ProtocolHeaderBytes()), "%s %d", &proto, &status); err == nil {
			return status
		}
	}
	t.Errorf("%s: %s record without an HTTP status line", uri, wr.Type())
	return 0
}

// TestWARCHoldsEveryPageOnceAndMetricsMoveMidCrawl: two nodes crawl with
// WARC output and /metrics on; mid-crawl the metrics show crawl and
// Temporal SDK counters moving; at the end the WARC files, read back and
// validated by the WARC library, hold every fetched page exactly once.
func TestWARCHoldsEveryPageOnceAndMetricsMoveMidCrawl(t *testing.T) {
	web := harness.StartWeb(t, synthweb.Config{
		Hosts: 8, Pages: 800, LinksPerPage: 6, CrossHostFraction: 0.3, Seed: 11,
		DeadLinkFraction: 0.02, TransientFraction: 0.03, TransientAttempts: 1,
	})
	s := harness.NewStack(t)
	warcDir := t.TempDir()
	// Both nodes serve /metrics: which of them owns hosts is the hash's
	// choice (8 hosts on random ports, so a node owns none in one run of
	// 256), and the test reads whichever fetched.
	metricsAddr := map[string]string{}
	withWARC := func() func(*config.Config) {
		port, err := devstack.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		return func(c *config.Config) {
			c.Node.WARCDir, c.Node.WARCMaxSize = warcDir, 1<<20 // small files: rotation is exercised
			c.Node.MetricsAddr = addr
			metricsAddr[c.Node.ID] = addr
		}
	}
	a := s.StartNodeWith("a", 1, withWARC())
	b := s.StartNodeWith("b", 1, withWARC())

	spec := loopbackSpec(web)
	spec.Politeness = campaign.Politeness{MinDelay: campaign.Duration(10 * time.Millisecond), MaxConcurrencyPerHost: 2}
	spec.Retry = campaign.Retry{InitialInterval: campaign.Duration(50 * time.Millisecond)}
	id := "warc-" + s.Name
	run, err := s.Campaigns.Start(bg, id, spec)
	if err != nil {
		t.Fatal(err)
	}
	waitFetched(t, s, id, 100)
	var (
		fams    map[string]*dto.MetricFamily
		fetcher string
		seen    []string
	)
	defer func() {
		if t.Failed() {
			t.Logf("last scrapes: %s", strings.Join(seen, "; "))
		}
	}()
	harness.Eventually(t, time.Minute, "a node's metrics to count its pages and Temporal activity", func() bool {
		seen = seen[:0]
		for _, node := range []string{a, b} {
			f := harness.ScrapeMetrics(t, metricsAddr[node])
			pages := harness.MetricSum(f["spiderpool_responses_total"], map[string]string{"class": "2xx", "node": node})
			activity := harness.MetricSum(f["temporal_activity_execution_latency_seconds"], nil)
			seen = append(seen, fmt.Sprintf("%s: 2xx=%.0f activities=%.0f", node, pages, activity))
			if pages > 0 && activity > 0 {
				fams, fetcher = f, node
				return true
			}
		}
		return false
	})
	for _, name := range []string{"spiderpool_fetch_duration_seconds", "spiderpool_host_wait_seconds",
		"spiderpool_lease_age_seconds", "spiderpool_response_bytes_total", "spiderpool_urls_total"} {
		if harness.MetricSum(fams[name], map[string]string{"node": fetcher}) == 0 {
			t.Errorf("%s is zero mid-crawl on node %s", name, fetcher)
		}
	}
	var sdk []string
	for name, f := range fams {
		if strings.HasPrefix(name, "temporal_") && harness.MetricSum(f, nil) > 0 {
			sdk = append(sdk, name)
		}
	}
	t.Logf("mid-crawl: node %s responses 2xx=%.0f, bytes=%.0f; %d Temporal SDK series non-zero (e.g. %v); %s",
		fetcher, harness.MetricSum(fams["spiderpool_responses_total"], map[string]string{"class": "2xx"}),
		harness.MetricSum(fams["spiderpool_response_bytes_total"], nil), len(sdk), head(sdk), strings.Join(seen, "; "))

	var summary campaign.Summary
	if err := run.Get(bounded(t, 3*time.Minute), &summary); err != nil {
		t.Fatal(err)
	}
	assertExactlyOnce(t, s, web, summary)
	s.StopNode(a) // closing the writers finishes their files
	s.StopNode(b)

	responses, requests, files := warcRecords(t, warcDir)
	pages := web.Pages()
	var missing, twice []string
	for _, p := range pages {
		switch responses[p] {
		case 0:
			missing = append(missing, p)
		case 1:
		default:
			twice = append(twice, p)
		}
		if requests[p] != web.ExpectedHits(p) {
			t.Errorf("%s: %d request records for %d requests the server expects", p, requests[p], web.ExpectedHits(p))
		}
	}
	if len(missing) > 0 || len(twice) > 0 || len(responses) != len(pages) {
		t.Fatalf("WARC files: %d of %d pages missing (e.g. %v), %d twice (e.g. %v), %d URIs in all",
			len(missing), len(pages), head(missing), len(twice), head(twice), len(responses))
	}
	t.Logf("WARC: %d files, %d response + %d request records, every one of %d pages once",
		files, len(responses), len(requests), len(pages))
}
