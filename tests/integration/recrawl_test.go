package integration

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/control"
	"github.com/spiderpool/spiderpool/store"
	"github.com/spiderpool/spiderpool/tests/harness"
	"github.com/spiderpool/spiderpool/tests/synthweb"
)

// TestScheduledRecrawlDownloadsOnlyWhatChanged: a Temporal schedule runs a
// campaign twice over a synthetic web; between the runs 10% of its pages
// change and 2% are removed (410 Gone). The second run asks for every page
// conditionally: the unchanged ones answer 304 and send no body, only the
// changed ones are downloaded, the removed ones are recorded gone, and it
// moves under 0.3x the first run's bytes.
func TestScheduledRecrawlDownloadsOnlyWhatChanged(t *testing.T) {
	web := harness.StartWeb(t, synthweb.Config{Hosts: 4, Pages: 400, LinksPerPage: 4, Seed: 15, PageBytes: 4 << 10, PlainLinks: true})
	s := harness.NewStack(t)
	s.StartNode("a", 1)
	s.StartNode("b", 1)
	schedules := &control.Schedules{Client: s.Client, Queue: s.Config.ControlQueue, Namespace: s.Config.Namespace}
	id := "recrawl-" + s.Name
	// Daily: the test runs it by trigger, as an operator may.
	if err := schedules.Create(bg, id, loopbackSpec(web), control.Recurrence{Every: 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { schedules.Delete(bg, id) })

	first := runScheduled(t, s, schedules, id, 1)
	run1 := web.Served()
	pages := len(web.Pages())
	if first.Fetched != int64(pages) || run1.ByStatus[http.StatusOK] < pages {
		t.Fatalf("first run fetched %d, the web served %v; want all %d pages", first.Fetched, run1.ByStatus, pages)
	}

	changed := web.Change(0.1, 7)
	removed := web.Remove(0.02, 8)
	isRemoved := map[string]bool{}
	for _, u := range removed {
		isRemoved[u] = true
	}
	// A page both changed and removed is removed.
	changed = slices.DeleteFunc(changed, func(u string) bool { return isRemoved[u] })
	web.Reset()
	second := runScheduled(t, s, schedules, id, 2)
	run2 := web.Served()

	unchanged := pages - len(changed) - len(removed)
	t.Logf("run 1: %d requests, %d body bytes; run 2: %d requests %v, %d body bytes (%.3fx); %d pages changed, %d removed",
		run1.Requests, run1.BodyBytes, run2.Requests, run2.ByStatus, run2.BodyBytes,
		float64(run2.BodyBytes)/float64(run1.BodyBytes), len(changed), len(removed))
	if got := run2.ByStatus[http.StatusNotModified]; got != unchanged {
		t.Errorf("run 2: %d answers 304, want one per unchanged page, %d", got, unchanged)
	}
	if got := run2.ByStatus[http.StatusGone]; got != len(removed) {
		t.Errorf("run 2: %d answers 410, want one per removed page, %d", got, len(removed))
	}
	// Bodies only for what changed: each changed page once, and nothing
	// else but robots.txt.
	downloaded := map[string]int{}
	for _, host := range web.Hosts() {
		for _, r := range web.Log(host) {
			if r.Status == http.StatusOK && r.Path != "/robots.txt" {
				downloaded["http://"+host+r.Path]++
			}
		}
	}
	isChanged := map[string]bool{}
	for _, u := range changed {
		isChanged[u] = true
		if downloaded[u] != 1 {
			t.Errorf("changed page %s downloaded %d times in run 2, want once", u, downloaded[u])
		}
	}
	for u, n := range downloaded {
		if !isChanged[u] {
			t.Errorf("run 2 downloaded %s (%d times), which had not changed", u, n)
		}
	}
	if ratio := float64(run2.BodyBytes) / float64(run1.BodyBytes); ratio >= 0.3 {
		t.Errorf("run 2 moved %.2fx the first run's body bytes, want under 0.3x", ratio)
	}
	if missing, dup := web.Tally(); missing != 0 || dup != 0 {
		t.Errorf("run 2: %d pages never requested, %d requested twice", missing, dup)
	}
	if second.Fetched != int64(pages-len(removed)) {
		t.Errorf("run 2 recorded %d pages fetched (304s included), want %d", second.Fetched, pages-len(removed))
	}

	// The export of run 2 tells each page's story across the series.
	records := exportAll(t, s, second.CampaignID)
	var notModified, changedOnce, gone int
	for url, r := range records {
		if r.FirstSeen == nil || r.LastFetched == nil || r.Changes == nil {
			t.Errorf("%s: export without its history: %+v", url, r)
			continue
		}
		switch {
		case isRemoved[url]:
			if r.Gone && r.Status == http.StatusGone {
				gone++
			}
		case isChanged[url]:
			if *r.Changes == 1 && r.LastChanged.After(*r.FirstSeen) && r.Status == http.StatusOK {
				changedOnce++
			}
		default:
			if *r.Changes == 0 && r.Status == http.StatusNotModified && r.LastChanged.Equal(*r.FirstSeen) &&
				r.Digest != "" && r.LastFetched.After(*r.FirstSeen) {
				notModified++
			}
		}
	}
	if notModified != unchanged || changedOnce != len(changed) || gone != len(removed) {
		t.Errorf("export of run 2: %d unchanged pages recorded not modified (want %d), %d changed once (want %d), %d gone (want %d)",
			notModified, unchanged, changedOnce, len(changed), gone, len(removed))
	}

	// A third run at once finds every live page not due for a revisit
	// (each was fetched minutes ago, and its interval is now at least
	// recrawl.min_interval): none is requested, yet the crawl still walks
	// the whole site, following the links each page had last time. The
	// removed pages, gone, are due at every run and asked again.
	web.Reset()
	third := runScheduled(t, s, schedules, id, 3)
	run3 := web.Served()
	if run3.ByStatus[http.StatusGone] != len(removed) || run3.Requests != len(removed) {
		t.Errorf("run 3: %d requests %v, want only the %d removed pages, 410", run3.Requests, run3.ByStatus, len(removed))
	}
	notDue := 0
	for url, r := range exportAll(t, s, third.CampaignID) {
		if r.State == "excluded" && strings.HasPrefix(r.Error, "recrawl: not due") {
			notDue++
		} else if !isRemoved[url] {
			t.Errorf("run 3: %s is %s (%s), want excluded as not due", url, r.State, r.Error)
		}
	}
	if notDue != pages-len(removed) {
		t.Errorf("run 3: %d pages not due, want every live page, %d", notDue, pages-len(removed))
	}
}

// runScheduled triggers the schedule and waits for the n-th campaign it
// started to end; it returns that campaign's summary.
func runScheduled(t *testing.T, s *harness.Stack, schedules *control.Schedules, id string, n int) campaign.Summary {
	t.Helper()
	if err := schedules.Trigger(bg, id); err != nil {
		t.Fatal(err)
	}
	var run control.ScheduledRun
	harness.Eventually(t, time.Minute, "the schedule to start its campaign", func() bool {
		info, err := schedules.Describe(bg, id)
		if err != nil || len(info.Recent) < n {
			return false
		}
		run = info.Recent[n-1]
		return true
	})
	if !strings.HasPrefix(run.CampaignID, id+"-") {
		t.Errorf("the schedule started campaign %s, want an ID under %s", run.CampaignID, id)
	}
	var sum campaign.Summary
	if err := s.Client.GetWorkflow(bg, run.CampaignID, run.RunID).Get(bounded(t, 3*time.Minute), &sum); err != nil {
		t.Fatalf("campaign %s: %v", run.CampaignID, err)
	}
	sum.CampaignID = run.CampaignID
	return sum
}

// exportAll is a campaign's export, every URL, by URL.
func exportAll(t *testing.T, s *harness.Stack, id string) map[string]store.PageRecord {
	t.Helper()
	key, err := s.Store.CampaignKey(bg, id)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]store.PageRecord{}
	if _, err := s.Store.ExportPages(bg, key, true, func(r store.PageRecord) error {
		out[r.URL] = r
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestTriggersInOneSecondStartTwoCampaigns: Temporal names a scheduled
// run after the second it was due, so a run triggered in the second of the
// last one would have its campaign ID and carry on that campaign. Two
// triggers in a row start two campaigns under two IDs.
func TestTriggersInOneSecondStartTwoCampaigns(t *testing.T) {
	s := harness.NewStack(t)
	schedules := &control.Schedules{Client: s.Client, Queue: s.Config.ControlQueue, Namespace: s.Config.Namespace}
	id := "twice-" + s.Name
	spec := campaign.Spec{Seeds: []string{"http://127.0.0.1:1/"}} // no node runs it: nothing is fetched
	if err := schedules.Create(bg, id, spec, control.Recurrence{Every: 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { schedules.Delete(bg, id) })
	var runs []control.ScheduledRun
	for n := 1; n <= 2; n++ {
		if err := schedules.Trigger(bg, id); err != nil {
			t.Fatal(err)
		}
		harness.Eventually(t, time.Minute, "the schedule to start its campaign", func() bool {
			info, err := schedules.Describe(bg, id)
			if err != nil || len(info.Recent) < n {
				return false
			}
			runs = info.Recent
			return true
		})
		// Ended at once, so the next trigger is not skipped as an overlap.
		if err := s.Client.TerminateWorkflow(bg, runs[n-1].CampaignID, runs[n-1].RunID, "test"); err != nil {
			t.Fatal(err)
		}
	}
	if runs[0].CampaignID == runs[1].CampaignID {
		t.Errorf("both triggers started campaign %s", runs[0].CampaignID)
	}
}
