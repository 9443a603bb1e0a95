package processors

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/processor"
	"github.com/spiderpool/spiderpool/store"
	"github.com/spiderpool/spiderpool/tests/harness"
	"github.com/spiderpool/spiderpool/tests/synthweb"
)

// TestRecurringRunsItemsCoverUnchangedPagesWithLastVersion: a daily price
// scraper's case. Three runs of one recrawl series over a synthetic web,
// with two processors on the same code, which makes of each page one item,
// its URL and the version it read: "complete" keeps the last version of
// unchanged pages, "changed" skips them (the default). Between runs 1 and
// 2, 20% of the pages change and 5% are removed; run 3 comes at once, with
// every live page not yet due.
//
// Every run's "complete" items are one per live page, each of the page's
// current version, while the web's own log shows the unchanged pages
// answered 304 (run 2) or were not asked at all (run 3), and the
// processor saw only the changed pages; the carried items name the run
// that fetched their version. "changed" has items only for what changed,
// and no removed page has any.
func TestRecurringRunsItemsCoverUnchangedPagesWithLastVersion(t *testing.T) {
	s := harness.NewStack(t)
	s.StartNode("a", 1)
	web := harness.StartWeb(t, synthweb.Config{Hosts: 2, Pages: 80, LinksPerPage: 3, Seed: 31, PlainLinks: true})

	queue := s.Name + ".versions"
	seen := &pagesSeen{byCampaign: map[string]map[string]bool{}}
	versionLine := regexp.MustCompile(`<p>version (\d+)</p>`)
	p := processor.New("versions").Queue(queue).OnPage(func(pg *processor.Page) error {
		campaignID, _, _ := strings.Cut(pg.Key, "/")
		seen.add(campaignID, pg.URL)
		version := 0
		if m := versionLine.FindSubmatch(pg.Body); m != nil {
			version, _ = strconv.Atoi(string(m[1]))
		}
		return pg.Item(versionItem{URL: pg.URL, Version: version})
	})
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, processor.WithClient(s.Client)) }()
	t.Cleanup(func() { cancel(); <-done })

	spec := campaign.Spec{
		Seeds:      []string{web.Seed()},
		Scope:      campaign.Scope{AllowedDomains: []string{"127.0.0.1"}},
		Politeness: campaign.Politeness{MaxConcurrencyPerHost: 4},
		Recrawl:    &campaign.Recrawl{Series: s.Name},
		Processors: []campaign.Processor{
			{Name: "complete", TaskQueue: queue, Activity: "versions", Unchanged: campaign.UnchangedLastVersion},
			{Name: "changed", TaskQueue: queue, Activity: "versions"},
		},
	}
	runs := []string{s.Name + "-1", s.Name + "-2", s.Name + "-3"}

	// Run 1: every page is new, processed by both.
	harness.RunCampaign(t, s, runs[0], spec, 2*time.Minute)
	pages := web.Pages()
	want := map[string]versionItem{}
	for _, u := range pages {
		want[u] = versionItem{URL: u}
	}
	expectItems(t, s, runs[0], "complete", want)
	expectItems(t, s, runs[0], "changed", want)

	changed := web.Change(0.2, 7)
	removed := web.Remove(0.05, 8)
	changed = slices.DeleteFunc(changed, func(u string) bool { return slices.Contains(removed, u) })
	if len(changed) == 0 || len(removed) == 0 {
		t.Fatalf("the web changed %d pages and removed %d: want some of each", len(changed), len(removed))
	}
	web.Reset()

	// Run 2: the unchanged pages answer 304, and keep their items of run 1.
	harness.RunCampaign(t, s, runs[1], spec, 2*time.Minute)
	downloaded, notModified := map[string]int{}, map[string]int{}
	for _, host := range web.Hosts() {
		for _, r := range web.Log(host) {
			switch {
			case r.Path == "/robots.txt":
			case r.Status == http.StatusOK:
				downloaded["http://"+host+r.Path]++
			case r.Status == http.StatusNotModified:
				notModified["http://"+host+r.Path]++
			}
		}
	}
	complete, onlyChanged := map[string]versionItem{}, map[string]versionItem{}
	for _, u := range web.Pages() {
		if slices.Contains(changed, u) {
			complete[u] = versionItem{URL: u, Version: 1}
			onlyChanged[u] = complete[u]
			if downloaded[u] != 1 {
				t.Errorf("run 2: changed page %s downloaded %d times, want once", u, downloaded[u])
			}
			continue
		}
		complete[u] = versionItem{URL: u, CarriedFrom: runs[0]}
		if notModified[u] != 1 || downloaded[u] != 0 {
			t.Errorf("run 2: unchanged page %s answered 304 %d times and 200 %d times, want one 304", u, notModified[u], downloaded[u])
		}
	}
	expectItems(t, s, runs[1], "complete", complete)
	expectItems(t, s, runs[1], "changed", onlyChanged)
	if got := seen.urls(runs[1]); !slices.Equal(got, sorted(changed)) {
		t.Errorf("run 2: the processor got %d pages %v, want only the %d changed ones %v", len(got), got, len(changed), sorted(changed))
	}

	// Run 3: nothing live is due, so nothing live is asked; every page
	// keeps the items of the run that fetched its version.
	web.Reset()
	harness.RunCampaign(t, s, runs[2], spec, 2*time.Minute)
	if served := web.Served(); served.Requests != len(removed) || served.ByStatus[http.StatusGone] != len(removed) {
		t.Errorf("run 3: the web answered %d requests %v, want only the %d removed pages, 410", served.Requests, served.ByStatus, len(removed))
	}
	for u, it := range complete {
		if it.CarriedFrom == "" {
			it.CarriedFrom = runs[1]
		}
		complete[u] = it
	}
	expectItems(t, s, runs[2], "complete", complete)
	expectItems(t, s, runs[2], "changed", map[string]versionItem{})
	if got := seen.urls(runs[2]); len(got) != 0 {
		t.Errorf("run 3: the processor got %d pages %v, want none", len(got), got)
	}
	for _, id := range runs {
		if n := bodiesLeft(t, s, id); n != 0 {
			t.Errorf("%s: %d page bodies or chunks kept after the run", id, n)
		}
	}
}

// versionItem is the item the test's processor makes of a page, and where
// the run's export says it came from.
type versionItem struct {
	URL         string `json:"url"`
	Version     int    `json:"version"`
	CarriedFrom string `json:"-"`
}

// pagesSeen is what the processor was sent, by campaign.
type pagesSeen struct {
	mu         sync.Mutex
	byCampaign map[string]map[string]bool
}

func (p *pagesSeen) add(campaignID, url string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byCampaign[campaignID] == nil {
		p.byCampaign[campaignID] = map[string]bool{}
	}
	p.byCampaign[campaignID][url] = true
}

func (p *pagesSeen) urls(campaignID string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for u := range p.byCampaign[campaignID] {
		out = append(out, u)
	}
	return sorted(out)
}

func sorted(ss []string) []string {
	out := slices.Clone(ss)
	slices.Sort(out)
	return out
}

// expectItems checks a run's exported items of one processor: one per
// page of want, equal to it, none for any other page.
func expectItems(t *testing.T, s *harness.Stack, id, proc string, want map[string]versionItem) {
	t.Helper()
	got := map[string]versionItem{}
	var problems []string
	_, err := s.Store.ExportItems(bg, key(t, s, id), proc, func(it store.Item) error {
		var v versionItem
		if err := json.Unmarshal(it.Item, &v); err != nil {
			return fmt.Errorf("item of %s: %w", it.URL, err)
		}
		v.CarriedFrom = it.CarriedFrom
		if _, twice := got[it.URL]; twice {
			problems = append(problems, it.URL+": more than one item")
		}
		got[it.URL] = v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for u, w := range want {
		switch g, ok := got[u]; {
		case !ok:
			problems = append(problems, u+": no item")
		case g != w:
			problems = append(problems, fmt.Sprintf("%s: item %+v, want %+v", u, g, w))
		}
	}
	for u := range got {
		if _, ok := want[u]; !ok {
			problems = append(problems, u+": an item, want none")
		}
	}
	if len(problems) > 0 {
		slices.Sort(problems)
		t.Errorf("%s, processor %s: %d items for %d pages; %d problems, the first: %s",
			id, proc, len(got), len(want), len(problems), strings.Join(problems[:min(len(problems), 8)], "; "))
	}
}
