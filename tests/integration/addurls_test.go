package integration

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/tests/harness"
	"github.com/spiderpool/spiderpool/tests/synthweb"
)

// TestAddURLsToARunningCampaign: 500 URLs added to a running campaign,
// through the CLI from a file: 300 new (a second site nothing links to),
// 100 the campaign knows already, 100 on a host out of scope. Each is
// reported as what it is, and every new one is fetched exactly once. The
// Temporal CLI adds through the same update.
func TestAddURLsToARunningCampaign(t *testing.T) {
	crawled := harness.StartWeb(t, synthweb.Config{Hosts: 1, Pages: 2000, LinksPerPage: 2, Seed: 15})
	unlinked := harness.StartWeb(t, synthweb.Config{Hosts: 1, Pages: 300, LinksPerPage: 2, Seed: 16})
	s := harness.NewStack(t)
	s.StartNode("a", 1)
	id := "add-" + s.Name
	spec := campaign.Spec{
		Seeds:      []string{crawled.Seed()},
		Scope:      campaign.Scope{AllowedDomains: []string{"127.0.0.1"}},
		Politeness: campaign.Politeness{MinDelay: campaign.Duration(10 * time.Millisecond), MaxConcurrencyPerHost: 1},
	}
	r, err := s.Campaigns.Start(bg, id, spec)
	if err != nil {
		t.Fatal(err)
	}
	var known []string
	harness.Eventually(t, time.Minute, "100 URLs known to the campaign", func() bool {
		known = s.Strings(`SELECT url FROM frontier WHERE campaign = (SELECT key FROM campaigns WHERE id = $1) ORDER BY id LIMIT 100`, id)
		return len(known) == 100
	})
	want := map[string]string{}
	var lines []string
	for i := range 300 {
		u := unlinked.URL(0, i)
		lines, want[u] = append(lines, u), campaign.AddedNew
	}
	for _, u := range known {
		lines, want[u] = append(lines, u), campaign.AddedDuplicate
	}
	for i := range 100 {
		u := fmt.Sprintf("http://elsewhere.example/p/%d.html", i)
		lines, want[u] = append(lines, u), campaign.AddedOutOfScope
	}
	common := []string{"--temporal-address", harness.Temporal(t).Address(), "--database-url", s.Config.DatabaseURL,
		"--control-queue", s.Config.ControlQueue}
	out := runCmd(t, "# 500 URLs\n"+strings.Join(lines, "\n")+"\n", harness.Binary(t),
		append([]string{"campaign", "add", id, "--file", "-", "--json"}, common...)...)
	if out.Code != 0 {
		t.Fatalf("campaign add: exit %d: %s", out.Code, out.Stderr)
	}
	var got struct {
		Added campaign.AddURLsResult `json:"added"`
	}
	if err := json.Unmarshal([]byte(out.Stdout), &got); err != nil {
		t.Fatalf("campaign add --json printed %q: %v", out.Stdout, err)
	}
	if len(got.Added.URLs) != 500 {
		t.Fatalf("%d URLs reported, want 500", len(got.Added.URLs))
	}
	for _, u := range got.Added.URLs {
		if u.Result != want[u.URL] {
			t.Errorf("%s reported %s (%s), want %s", u.URL, u.Result, u.Reason, want[u.URL])
		}
	}
	if a := got.Added; a.New != 300 || a.Duplicate != 100 || a.OutOfScope != 100 || a.Invalid != 0 {
		t.Errorf("counts %d new, %d duplicate, %d out of scope, %d invalid; want 300, 100, 100, 0",
			a.New, a.Duplicate, a.OutOfScope, a.Invalid)
	}

	// The Temporal CLI, through the same update: a URL known by now and
	// one that is not a URL.
	tout := runCmd(t, "", temporalCLI(t), "workflow", "update", "execute", "--address", harness.Temporal(t).Address(),
		"--workflow-id", id, "--name", campaign.AddURLs, "-o", "json",
		"--input", `{"urls": ["`+unlinked.URL(0, 0)+`", "ftp://nowhere/"]}`)
	if tout.Code != 0 {
		t.Fatalf("temporal workflow update execute: exit %d: %s %s", tout.Code, tout.Stdout, tout.Stderr)
	}
	var viaCLI struct {
		Result campaign.AddURLsResult `json:"result"`
	}
	if err := json.Unmarshal([]byte(tout.Stdout), &viaCLI); err != nil || viaCLI.Result.Duplicate != 1 || viaCLI.Result.Invalid != 1 {
		t.Errorf("temporal workflow update printed %q (%v): want 1 duplicate and 1 invalid", tout.Stdout, err)
	}

	sum, err := s.Campaigns.Result(bounded(t, 3*time.Minute), id)
	if err != nil {
		t.Fatalf("campaign: %v (%v)", err, r.GetRunID())
	}
	if missing, dup := unlinked.Tally(); missing != 0 || dup != 0 {
		t.Errorf("of the 300 added pages, %d never requested, %d requested more than once", missing, dup)
	}
	if missing, dup := crawled.Tally(); missing != 0 || dup != 0 {
		t.Errorf("the crawled site: %d pages never requested, %d more than once", missing, dup)
	}
	if wantPages := int64(2000 + 300); sum.Fetched != wantPages {
		t.Errorf("fetched %d pages, want %d", sum.Fetched, wantPages)
	}
}

// TestAddedURLsWithPriorityGoFirst: on a politeness-bound site, URLs added
// with priority 10 mid-campaign are fetched before every URL of the host
// that was pending when they were added (at the same depth, and found
// before them), in the order the site's access log saw the requests. The
// campaign is paused while they are added, so that "pending then" is exact:
// no URL is leased at that moment.
func TestAddedURLsWithPriorityGoFirst(t *testing.T) {
	web := harness.StartWeb(t, synthweb.Config{Hosts: 1, Pages: 800, Seed: 17})
	s := harness.NewStack(t)
	s.StartNode("a", 1)
	id := "prio-" + s.Name
	// Pages 0-299 are seeds, at depth 0 like added URLs: breadth-first
	// order alone would take the added ones (found last) after them all.
	// The added pages, 700-719, are linked only from pages 349-359, at
	// depth 1: not fetched before every seed is.
	spec := campaign.Spec{
		Politeness: campaign.Politeness{MinDelay: campaign.Duration(20 * time.Millisecond), MaxConcurrencyPerHost: 1},
	}
	for i := range 300 {
		spec.Seeds = append(spec.Seeds, web.URL(0, i))
	}
	if _, err := s.Campaigns.Start(bg, id, spec); err != nil {
		t.Fatal(err)
	}
	count := func(q string) int {
		var n int
		fmt.Sscan(s.Strings(q, id)[0], &n)
		return n
	}
	const inCampaign = `campaign = (SELECT key FROM campaigns WHERE id = $1)`
	harness.Eventually(t, time.Minute, "30 pages fetched", func() bool {
		return count(`SELECT count(*)::text FROM pages WHERE `+inCampaign) >= 30
	})
	if _, err := s.Campaigns.Pause(bg, id); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, time.Minute, "no URL leased once paused", func() bool {
		return count(`SELECT count(*)::text FROM frontier WHERE state = 'leased' AND `+inCampaign) == 0
	})
	pendingThen := s.Strings(`SELECT url FROM frontier WHERE state = 'pending' AND `+inCampaign, id)
	var added []string
	for i := 700; i < 720; i++ {
		added = append(added, web.URL(0, i))
	}
	res, err := s.Campaigns.AddURLs(bg, id, added, 10)
	if err != nil {
		t.Fatal(err)
	}
	if res.New != len(added) {
		t.Fatalf("%d of the %d URLs added were new (%+v): the crawl knew them already, the test proves nothing", res.New, len(added), res)
	}
	if _, err := s.Campaigns.Resume(bg, id); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Campaigns.Result(bounded(t, 3*time.Minute), id); err != nil {
		t.Fatalf("campaign: %v", err)
	}

	at := map[string]int{} // path -> its first request's place in the log
	for i, r := range web.Log(web.Hosts()[0]) {
		if _, seen := at[r.Path]; !seen {
			at[r.Path] = i
		}
	}
	path := func(raw string) string {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		return u.RequestURI()
	}
	lastAdded, firstPending := -1, len(web.Log(web.Hosts()[0]))
	for _, u := range added {
		i, ok := at[path(u)]
		if !ok {
			t.Fatalf("added %s was never requested", u)
		}
		lastAdded = max(lastAdded, i)
	}
	for _, u := range pendingThen {
		if i, ok := at[path(u)]; ok {
			firstPending = min(firstPending, i)
		}
	}
	t.Logf("%d URLs pending when 20 were added with priority 10: the added ones were requests up to #%d, the first of the others #%d",
		len(pendingThen), lastAdded, firstPending)
	if lastAdded > firstPending {
		t.Errorf("an added URL was requested at #%d, after #%d, a URL of lower priority pending before it", lastAdded, firstPending)
	}
	if missing, dup := web.Tally(); missing != 0 || dup != 0 {
		t.Errorf("%d pages never requested, %d more than once", missing, dup)
	}
}
