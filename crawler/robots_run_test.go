package crawler

import (
	"log/slog"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/crawl"
)

// TestRobotsRunOfFailures: how long a robots.txt has been unreachable is
// counted from the first failure of a run of them; an answer ends the run,
// and so does a gap between failures longer than the campaign's
// robots_ttl (and a retry and runGap), which says nothing of the time
// between. The node gives a host's URLs up once a run is robots_ttl long.
func TestRobotsRunOfFailures(t *testing.T) {
	c := newRobotsCache(nil, nil, nil, slog.New(slog.DiscardHandler))
	r := &rules{spec: campaign.Spec{Politeness: campaign.Politeness{
		RobotsTTL: campaign.Duration(time.Hour), RobotsRetry: campaign.Duration(time.Minute)}}}
	const origin = "http://x.test"
	down := crawl.ParseRobots(503, nil)
	t0 := time.Now().Add(-24 * time.Hour)
	for _, step := range []struct {
		what  string
		at    time.Duration // after t0
		robot *crawl.Robots
		since time.Duration // after t0; -1: none
	}{
		{"first failure", 0, down, 0},
		{"failure 30m later", 30 * time.Minute, down, 0},
		{"failure 61m after that, within robots_ttl, a retry and runGap", 91 * time.Minute, down, 0},
		{"an answer", 100 * time.Minute, crawl.ParseRobots(200, []byte("User-agent: *\nAllow: /\n")), -1},
		{"failure after an answer", 2 * time.Hour, down, 2 * time.Hour},
		{"failure 3h after the last", 5 * time.Hour, down, 5 * time.Hour},
	} {
		got := c.found(r, origin, step.robot, t0.Add(step.at)).failingSince
		want := t0.Add(step.since)
		if step.since < 0 {
			want = time.Time{}
		}
		if !got.Equal(want) {
			t.Fatalf("%s: failing since %v, want %v", step.what, got, want)
		}
	}
}
