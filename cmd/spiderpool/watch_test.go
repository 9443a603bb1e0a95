package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/campaign"
)

func watchStatus(fetched int64) campaign.Status {
	return campaign.Status{
		CampaignID: "c1", State: "running", Run: 1, Pending: 500,
		Counters: campaign.Counters{Fetched: fetched, Failed: 10, Excluded: 40, Discovered: 1000},
		Nodes: []campaign.NodeStatus{
			{ID: "node-1", State: "active", Weight: 1, Fetched: fetched / 4, InflightURLs: 50},
			{ID: "node-2", State: "active", Weight: 3, Fetched: fetched - fetched/4, InflightURLs: 50},
		},
	}
}

func TestFrameShowsProgressRateAndNodeBars(t *testing.T) {
	p := measure(watchStatus(400), 100)
	// settled 450 of 450 + 500 pending + 100 in flight
	if p.done != 450 || p.known != 1050 {
		t.Fatalf("done %d known %d, want 450 of 1050", p.done, p.known)
	}
	mid := watchStatus(400)
	mid.Pending, mid.Counters.Seeds, mid.Counters.Discovered = 0, 1, 5000 // pending is counted only when nothing is due
	if k := measure(mid, 0).known; k != 5001 {
		t.Errorf("known %d, want seeds + discovered = 5001", k)
	}
	if got := p.eta(); got != "6s" {
		t.Errorf("ETA %q, want 6s (600 URLs at 100/s)", got)
	}
	frame := renderFrame(watchStatus(400), p, 42*time.Second, 100)
	if len(frame) != 5 {
		t.Fatalf("frame has %d lines, want header, bar, counters and two nodes:\n%s", len(frame), strings.Join(frame, "\n"))
	}
	if !strings.Contains(frame[1], " 43%") || !strings.Contains(frame[1], "450/1050 URLs") || !strings.Contains(frame[1], "100 pages/s") {
		t.Errorf("progress line %q", frame[1])
	}
	if !strings.Contains(frame[4], "node-2") || !strings.Contains(frame[4], " 75%") {
		t.Errorf("node-2 line %q, want its 75%% share", frame[4])
	}
	if full := strings.Count(frame[1], "█"); full == 0 || strings.Count(frame[1], "░") == 0 {
		t.Errorf("bar %q should be part full", frame[1])
	}
}

func TestWatchRedrawsOnTerminalAndPrintsLinesOtherwise(t *testing.T) {
	start := time.Unix(1000, 0)
	var plain bytes.Buffer
	w := &watcher{out: &plain, width: 80, start: start}
	w.report(watchStatus(100), start.Add(time.Second))
	w.report(watchStatus(300), start.Add(2*time.Second))
	lines := strings.Split(strings.TrimSpace(plain.String()), "\n")
	if len(lines) != 2 || strings.Contains(plain.String(), "\x1b") {
		t.Fatalf("not a terminal: want two plain lines, got %q", plain.String())
	}
	if !strings.Contains(lines[1], "200 pages/s") {
		t.Errorf("second line %q: 200 pages fetched in a second", lines[1])
	}

	var tty bytes.Buffer
	w = &watcher{out: &tty, tty: true, width: 80, start: start}
	w.report(watchStatus(100), start.Add(time.Second))
	first := tty.Len()
	w.report(watchStatus(300), start.Add(2*time.Second))
	if strings.Contains(tty.String()[:first], "\x1b[") {
		t.Error("first frame moved the cursor: nothing to redraw yet")
	}
	if !strings.Contains(tty.String()[first:], "\x1b[5F\x1b[J") {
		t.Errorf("second frame should go back over the first's 5 lines: %q", tty.String()[first:])
	}
}

// TestCountsNeverShowMoreFetchedThanKnown: a campaign of one seed whose
// links found 5,999 more, all fetched, reads as 6,000 fetched of 6,000
// known in every view, not "fetched 6000 discovered 5999"; URLs added by
// add_urls count as known too.
func TestCountsNeverShowMoreFetchedThanKnown(t *testing.T) {
	st := campaign.Status{CampaignID: "c1", State: "completed", Run: 1,
		Counters: campaign.Counters{Seeds: 1, Discovered: 5999, Fetched: 6000}}
	var status bytes.Buffer
	printStatus(&status, st)
	views := map[string]string{
		"progress line": progressLine(st),
		"status":        status.String(),
		"watch frame":   strings.Join(renderFrame(st, measure(st, 0), time.Second, 100), "\n"),
	}
	for name, text := range views {
		if !strings.Contains(text, "known 6000") || strings.Contains(text, "discovered 5999") {
			t.Errorf("%s reads %q: want 6000 known beside 6000 fetched", name, text)
		}
	}
	st.Counters.Added = 500
	if k := measure(st, 0).known; k != 6500 {
		t.Errorf("known %d with 500 URLs added, want 6500", k)
	}
}
