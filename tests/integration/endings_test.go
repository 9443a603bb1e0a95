package integration

import (
	"net/http"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/tests/harness"
	"github.com/spiderpool/spiderpool/tests/synthweb"
)

// TestRobotsUnreachableForeverEnds: a host whose robots.txt answers 503 for
// ever used to keep its URLs pending for ever, and its campaign running.
// Once the file has been unreachable for the campaign's robots_ttl, the
// host's URLs end failed with the reason, no page of the host having been
// requested, and the campaign completes.
func TestRobotsUnreachableForeverEnds(t *testing.T) {
	web := harness.StartWeb(t, synthweb.Config{
		Hosts: 3, Pages: 3 * 10, LinksPerPage: 3, CrossHostFraction: 0.5, Seed: 11,
		Custom: map[int]map[string]http.HandlerFunc{1: {"/robots.txt": func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "down", http.StatusServiceUnavailable)
		}}},
	})
	down := web.Hosts()[1]
	s := harness.NewStack(t)
	s.StartNode("a", 1)
	spec := loopbackSpec(web)
	spec.Politeness.RobotsTTL = campaign.Duration(time.Second)
	spec.Politeness.RobotsRetry = campaign.Duration(200 * time.Millisecond)
	sum := harness.RunCampaign(t, s, "robots-down-"+s.Name, spec, 2*time.Minute)

	rows := s.Strings(`SELECT state::text || ' ' || coalesce(last_error, '') FROM frontier WHERE shard_key = $1`, down)
	if len(rows) == 0 {
		t.Fatalf("no URL of host %s was discovered; the test needs some", down)
	}
	const want = "failed robots.txt unreachable: HTTP 503, for longer than politeness.robots_ttl (1s)"
	for _, r := range rows {
		if r != want {
			t.Fatalf("a URL of the host whose robots.txt is down ended %q, want %q", r, want)
		}
	}
	robots := 0
	for _, r := range web.Log(down) {
		if r.Path != "/robots.txt" {
			t.Fatalf("page %s of a host whose robots.txt never answered was requested", r.Path)
		}
		robots++
	}
	if sum.Pending != 0 || sum.Failed != int64(len(rows)) || sum.Fetched == 0 {
		t.Fatalf("summary %+v; want the other hosts fetched, the %d URLs of %s failed, nothing pending", sum, len(rows), down)
	}
	t.Logf("%d URLs of %s failed after %d robots.txt requests; %d pages fetched elsewhere", len(rows), down, robots, sum.Fetched)
}
