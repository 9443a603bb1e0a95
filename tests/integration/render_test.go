package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	sdkpb "go.temporal.io/api/sdk/v1"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/config"
	"github.com/spiderpool/spiderpool/processor"
	"github.com/spiderpool/spiderpool/ring"
	"github.com/spiderpool/spiderpool/store"
	"github.com/spiderpool/spiderpool/tests/harness"
	"github.com/spiderpool/spiderpool/tests/synthweb"
)

// campaignFrontier is frontierByURL for one campaign of the stack.
func campaignFrontier(t *testing.T, s *harness.Stack, id string) map[string]frontierRow {
	t.Helper()
	return frontierRows(t, s, `
		SELECT f.url, f.state::text, coalesce(f.last_error, ''), coalesce(f.last_status, 0), f.attempts
		FROM frontier f JOIN campaigns c ON c.key = f.campaign WHERE c.id = $1`, id)
}

type viewItem struct {
	URL      string `json:"url"`
	Text     string `json:"text"`
	Rendered bool   `json:"rendered"`
}

// viewsProcessor runs, until the test ends, a processor named name that
// makes an item of the text of each element matching selector on the
// app's views (and no other page), with whether the page was rendered. Its
// spec entry asks for document (campaign.Processor.Document).
func viewsProcessor(t *testing.T, s *harness.Stack, name, selector, document string) campaign.Processor {
	t.Helper()
	p := processor.New(name).Queue(s.Name+"."+name).OnHTML(selector, func(e *processor.Element) error {
		if !strings.Contains(e.Page.URL, synthweb.SPARoot+"view/") {
			return nil
		}
		return e.Page.Item(viewItem{URL: e.Page.URL, Text: e.Text(), Rendered: e.Page.Rendered})
	})
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx, processor.WithClient(s.Client)) }()
	t.Cleanup(func() { cancel(); <-done })
	spec := p.Spec()
	spec.Document = document
	return spec
}

// viewItems are the items of the campaign's processor name, each as
// "<url> <text> rendered=<bool>".
func viewItems(t *testing.T, s *harness.Stack, id, name string) map[string]bool {
	t.Helper()
	key, err := s.Store.CampaignKey(bg, id)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	if _, err := s.Store.ExportItems(bg, key, name, func(it store.Item) error {
		var v viewItem
		if err := json.Unmarshal(it.Item, &v); err != nil {
			return err
		}
		out[fmt.Sprintf("%s %s rendered=%v", v.URL, v.Text, v.Rendered)] = true
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// renderSpec crawls the app on web's only host, rendering its script-built
// routes.
func renderSpec(web *synthweb.Web) campaign.Spec {
	host := web.Hosts()[0]
	return campaign.Spec{
		Seeds:      []string{"http://" + host + synthweb.SPARoot},
		Scope:      campaign.Scope{AllowedDomains: []string{"127.0.0.2"}},
		Politeness: campaign.Politeness{MaxConcurrencyPerHost: 2},
		Retry:      campaign.Retry{MaxAttempts: 2, InitialInterval: campaign.Duration(50 * time.Millisecond)},
		Render: &campaign.Render{
			Hosts:   []string{host},
			Include: []string{synthweb.RenderPattern},
			// The feed scrolls ten pages of items in; a busy machine
			// (the race detector, other suites) takes its time.
			Timeout: campaign.Duration(45 * time.Second),
			Scroll:  campaign.Scroll{Steps: 60, Wait: campaign.Duration(time.Second)},
		},
	}
}

// TestRenderFindsWhatScriptsBuild: the app shows nothing without
// JavaScript. A plain crawl finds its shell alone; a crawl that renders it
// on a browser node finds every route, every view's fetch()-loaded link,
// every one of the feed's 200 items (loaded only as the page is
// scrolled) and loads each page and resource once; the page whose script
// never ends fails with that reason; the script's request to a loopback
// address outside the node's allow-list never reaches its listener. A
// processor gets each view's rendered DOM, one that asks for the original
// the shell the server sent, both flagged rendered, and each view's page
// record says it was rendered.
func TestRenderFindsWhatScriptsBuild(t *testing.T) {
	forbidden := listenCounting(t, "tcp4", "127.0.0.1:0")
	if forbidden == nil {
		t.Fatal("cannot listen on 127.0.0.1")
	}
	spa := synthweb.NewSPA("http://" + forbidden.l.Addr().String() + "/secret")
	web := harness.StartWeb(t, synthweb.Config{Hosts: 1, Pages: 1, Listen: "127.0.0.2",
		Custom: map[int]map[string]http.HandlerFunc{0: spa.Site()}})
	base := "http://" + web.Hosts()[0]

	s := harness.NewStack(t)
	s.StartNodeWith("browser", 1, func(c *config.Config) {
		c.Node.Browser = "auto"
		c.Node.AllowPrivateNetworks = false // the default: only the app's address is allowed
		c.Node.AllowNetworks = []string{"127.0.0.2/32"}
	})

	plain := renderSpec(web)
	plain.Render = nil
	sum := harness.RunCampaign(t, s, "plain-"+s.Name, plain, 2*time.Minute)
	if sum.Fetched != 1 || sum.URLs != 1 {
		t.Errorf("plain crawl: %d URLs, %d fetched; want the shell alone", sum.URLs, sum.Fetched)
	}
	web.Reset()

	// A processor reads the text the views' scripts loaded by fetch():
	// it gets the rendered HTML. One that asks for the original gets the
	// shell the server sent, whose root says "Loading…".
	spec := renderSpec(web)
	spec.Processors = []campaign.Processor{
		viewsProcessor(t, s, "views", "p.data", ""),
		viewsProcessor(t, s, "shells", "#root", campaign.DocumentOriginal),
	}

	id := "render-" + s.Name
	sum = harness.RunCampaign(t, s, id, spec, 4*time.Minute)
	fr := campaignFrontier(t, s, id)
	hits := web.Hits()
	for _, p := range spa.Pages() {
		u := base + p
		r := fr[u]
		switch {
		case p == synthweb.SPASpin:
			if r.state != "failed" || !strings.Contains(r.lastError, "spec.render.timeout") {
				t.Errorf("%s: %+v, want failed for its endless script", p, r)
			}
			t.Logf("%s: %s", p, r.lastError)
		case r.state != "fetched":
			t.Errorf("%s: %+v, want fetched", p, r)
		}
		if hits[u] != 1 {
			t.Errorf("%s loaded %d times, want once", p, hits[u])
		}
	}
	for _, p := range spa.Resources() {
		if hits[base+p] != 1 {
			t.Errorf("resource %s loaded %d times, want once", p, hits[base+p])
		}
	}
	if len(fr) != len(spa.Pages()) {
		t.Errorf("the render crawl found %d URLs, want the app's %d pages", len(fr), len(spa.Pages()))
	}
	views, shells := map[string]bool{}, map[string]bool{}
	for v := 1; v <= spa.Views; v++ {
		views[fmt.Sprintf("%s/app/view/%d %s rendered=true", base, v, synthweb.ViewText(v))] = true
		shells[fmt.Sprintf("%s/app/view/%d Loading… rendered=true", base, v)] = true
	}
	for name, want := range map[string]map[string]bool{"views": views, "shells": shells} {
		if got := viewItems(t, s, id, name); !maps.Equal(got, want) {
			t.Errorf("processor %s's items: %v, want %v", name, slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
		}
	}
	checkRenderedRecords(t, s, id, base, spa)
	if n := forbidden.accepted.Load(); n != 0 {
		t.Errorf("the forbidden listener accepted %d connections", n)
	}
	t.Logf("render crawl: %d URLs, %d fetched, %d failed in %.1fs; %d requests served, app.js %d times",
		sum.URLs, sum.Fetched, sum.Failed, sum.Seconds, web.Requests(), hits[base+synthweb.SPARoot+"app.js"])
}

// checkRenderedRecords: the record of each view the app's script built
// says it was rendered, its DOM larger than the shell served (the
// record's length and digest); a doc page, fetched plainly, says not.
func checkRenderedRecords(t *testing.T, s *harness.Stack, id, base string, spa *synthweb.SPA) {
	t.Helper()
	key, err := s.Store.CampaignKey(bg, id)
	if err != nil {
		t.Fatal(err)
	}
	records := map[string]store.PageRecord{}
	if _, err := s.Store.ExportPages(bg, key, false, func(r store.PageRecord) error { records[r.URL] = r; return nil }); err != nil {
		t.Fatal(err)
	}
	for v := 1; v <= spa.Views; v++ {
		view, doc := records[fmt.Sprintf("%s/app/view/%d", base, v)], records[fmt.Sprintf("%s/app/doc/%d", base, v)]
		if !view.Rendered || view.RenderedLength <= view.Length || !strings.HasPrefix(view.RenderedDigest, "sha256:") || view.RenderedDigest == view.Digest {
			t.Errorf("view %d's record: %+v, want rendered, its DOM larger than the shell served", v, view)
		}
		if doc.URL == "" || doc.Rendered || doc.RenderedLength != 0 {
			t.Errorf("doc %d's record: %+v, want a page fetched plainly", v, doc)
		}
	}
}

// pageNodes maps each page of the campaign to the node that fetched it.
func pageNodes(t *testing.T, s *harness.Stack, id string) map[string]string {
	t.Helper()
	rows, err := s.Store.Pool().Query(bg, `
		SELECT f.url, p.node FROM pages p JOIN frontier f ON f.id = p.url_id
		JOIN campaigns c ON c.key = p.campaign WHERE c.id = $1`, id)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (kv [2]string, err error) {
		err = r.Scan(&kv[0], &kv[1])
		return kv, err
	})
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, kv := range out {
		m[kv[0]] = kv[1]
	}
	return m
}

// TestRenderHostsGoOnlyToBrowserNodes: of three nodes, one has a browser.
// Every page of the render host (rendered or not) is fetched by it; every
// other host's pages by its owner on the ring of all three, the browser
// node included. The owners are computed with the campaign's own hash,
// so the test holds whatever ports the web gets.
func TestRenderHostsGoOnlyToBrowserNodes(t *testing.T) {
	spa := &synthweb.SPA{Views: 2, Images: 1, Items: 40}
	web := harness.StartWeb(t, synthweb.Config{
		Hosts: 9, Pages: 9 * 15, LinksPerPage: 2, CrossHostFraction: 0.3, Seed: 5,
		Custom:     map[int]map[string]http.HandlerFunc{0: spa.Site()},
		ExtraLinks: map[int][]string{0: {synthweb.SPARoot}},
	})
	s := harness.NewStack(t)
	browser := s.StartNodeWith("browser", 1, func(c *config.Config) { c.Node.Browser = "auto" })
	plainA, plainB := s.StartNode("a", 1), s.StartNode("b", 1)
	renderHost := web.Hosts()[0]
	spec := loopbackSpec(web)
	spec.Scope.Exclude = []string{"/app/(spin|probe)$"}
	spec.Render = &campaign.Render{Hosts: []string{renderHost}, Include: []string{synthweb.RenderPattern},
		Scroll: campaign.Scroll{Steps: 20, Wait: campaign.Duration(time.Second)}}
	id := "browser-nodes-" + s.Name
	sum := harness.RunCampaign(t, s, id, spec, 4*time.Minute)

	all := ring.New(ring.Node{ID: browser, Weight: 1}, ring.Node{ID: plainA, Weight: 1}, ring.Node{ID: plainB, Weight: 1})
	perNode := map[string]int{}
	for u, node := range pageNodes(t, s, id) {
		host := strings.TrimPrefix(u, "http://")
		host = host[:strings.Index(host, "/")]
		want := browser
		if host != renderHost {
			want, _ = all.Lookup(host)
		}
		if node != want {
			t.Errorf("%s fetched by %s, want %s", u, node, want)
		}
		perNode[node]++
	}
	if missing, dup := web.Tally(); missing != 0 || dup != 0 {
		t.Errorf("%d pages never requested, %d requested twice", missing, dup)
	}
	hits := web.Hits()
	for _, p := range spa.Pages() {
		if p == synthweb.SPASpin || p == synthweb.SPAProbe {
			continue
		}
		if n := hits["http://"+renderHost+p]; n != 1 {
			t.Errorf("%s loaded %d times, want once", p, n)
		}
	}
	t.Logf("%d pages fetched, by node: %v", sum.Fetched, perNode)
}

// descendants are the live processes below pid (its browser and the
// browser's helpers), read from /proc.
func descendants(t *testing.T, pid int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	children := map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone since the listing
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after ")".
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(fields) < 2 || fields[0] == "Z" {
			continue
		}
		if ppid, err := strconv.Atoi(fields[1]); err == nil {
			children[ppid] = append(children[ppid], p)
		}
	}
	var out []int
	for queue := []int{pid}; len(queue) > 0; queue = queue[1:] {
		for _, c := range children[queue[0]] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

func alive(pids []int) []int {
	var out []int
	for _, p := range pids {
		if stat, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/stat"); err == nil {
			if f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:])); len(f) > 0 && f[0] != "Z" {
				out = append(out, p)
			}
		}
	}
	return out
}

// TestKilledBrowserNodeLeavesNoChromiumAndItsPagesMove: two browser nodes
// as processes and a plain one. The browser node that owns the render
// host (by the campaign's hash over the browser nodes) is killed with
// SIGKILL mid-crawl: its Chromium and every helper process of it are gone
// soon after, the host moves to the other browser node, and in the end
// every page was fetched, twice at most for the requests in flight at the
// kill.
func TestKilledBrowserNodeLeavesNoChromiumAndItsPagesMove(t *testing.T) {
	spa, web, spec := appBesidePlainHosts(t)
	s := harness.NewStack(t)
	b1 := s.StartNodeProcess("browser1", 1, "--browser", "auto")
	b2 := s.StartNodeProcess("browser2", 1, "--browser", "auto")
	s.StartNode("plain", 1)
	renderHost := web.Hosts()[0]
	owner, _ := ring.New(ring.Node{ID: b1.ID, Weight: 1}, ring.Node{ID: b2.ID, Weight: 1}).Lookup(renderHost)
	victim, heir := b1, b2
	if owner == b2.ID {
		victim, heir = b2, b1
	}

	id := "browser-kill-" + s.Name
	if _, err := s.Campaigns.Start(bg, id, spec); err != nil {
		t.Fatal(err)
	}
	var chromium []int
	harness.Eventually(t, 2*time.Minute, "the render host's owner rendering, mid-crawl", func() bool {
		n := appPagesBy(t, s, id, renderHost, victim.ID)
		chromium = descendants(t, victim.PID())
		return n >= 3 && len(chromium) > 0
	})
	rss := rssKiB(append([]int{victim.PID()}, chromium...))
	if err := victim.Kill(); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 30*time.Second, "no Chromium of the killed node left", func() bool {
		return len(alive(chromium)) == 0
	})
	sum := harness.CampaignResult(t, s, id, 4*time.Minute)

	byNode := hostPagesByNode(t, s, id, renderHost)
	if byNode[heir.ID] == 0 {
		t.Errorf("the render host's pages by node %v: none moved to %s", byNode, heir.ID)
	}
	missing, dup := tallyWithApp(web, spa)
	// In flight at the kill: the host's concurrency, 2.
	if missing != 0 || dup > spec.Politeness.MaxConcurrencyPerHost {
		t.Errorf("%d pages never fetched, %d fetched twice (want 0, and at most the %d in flight)", missing, dup, spec.Politeness.MaxConcurrencyPerHost)
	}
	t.Logf("node and its Chromium used %d MiB (RSS, shared pages counted per process)", rss>>10)
	t.Logf("killed %s with %d Chromium processes under it; render host pages by node %v; %d fetched, %d twice",
		victim.ID, len(chromium), byNode, sum.Fetched, dup)
}

// workflowDetails are the campaign's current details, as the Web UI shows
// them.
func workflowDetails(t *testing.T, s *harness.Stack, id string) string {
	t.Helper()
	v, err := s.Client.QueryWorkflow(bounded(t, 30*time.Second), id, "", "__temporal_workflow_metadata")
	if err != nil {
		t.Fatal(err)
	}
	var md sdkpb.WorkflowMetadata
	if err := v.Get(&md); err != nil {
		t.Fatal(err)
	}
	return md.GetCurrentDetails()
}

// TestRenderWaitsForABrowserNode: with no browser node, the render host's
// pages wait (pending, none failed) while the other hosts are crawled,
// and the campaign says so where operators look (the Web UI's details,
// the figures of `campaign status`); a browser node that joins takes them,
// and the campaign ends with every page fetched once.
func TestRenderWaitsForABrowserNode(t *testing.T) {
	spa := &synthweb.SPA{Views: 2, Images: 1, Items: 20}
	web := harness.StartWeb(t, synthweb.Config{
		Hosts: 3, Pages: 3 * 10, LinksPerPage: 2, Seed: 3,
		Custom:     map[int]map[string]http.HandlerFunc{0: spa.Site()},
		ExtraLinks: map[int][]string{0: {synthweb.SPARoot}},
	})
	s := harness.NewStack(t)
	s.StartNode("plain", 1)
	renderHost := web.Hosts()[0]
	spec := loopbackSpec(web)
	spec.Seeds = web.Roots()
	spec.Scope.Exclude = []string{"/app/(spin|probe)$"}
	spec.Render = &campaign.Render{Hosts: []string{renderHost}, Include: []string{synthweb.RenderPattern},
		Scroll: campaign.Scroll{Steps: 10, Wait: campaign.Duration(time.Second)}}
	id := "browser-wait-" + s.Name
	run, err := s.Campaigns.Start(bg, id, spec)
	if err != nil {
		t.Fatal(err)
	}
	plainPages := 0
	for _, u := range web.Pages() {
		if !strings.Contains(u, renderHost+"/") {
			plainPages++
		}
	}
	var waiting int64
	harness.Eventually(t, 2*time.Minute, "the other hosts crawled and the render host waiting, said so", func() bool {
		fetched := 0
		for u := range pageNodes(t, s, id) {
			if !strings.Contains(u, renderHost+"/") {
				fetched++
			}
		}
		key, err := s.Store.CampaignKey(bg, id)
		if err != nil {
			return false // the workflow has not written it yet
		}
		if waiting, err = s.Store.RenderWaiting(bg, key, spec.Render, nil); err != nil {
			t.Fatal(err)
		}
		return fetched == plainPages && waiting > 0 &&
			strings.Contains(workflowDetails(t, s, id), "waiting for a browser node")
	})
	for u, r := range campaignFrontier(t, s, id) {
		if strings.Contains(u, renderHost+"/") && r.state != "pending" {
			t.Errorf("%s: %+v, want pending until a browser node comes", u, r)
		}
	}
	if n := web.Hits()["http://"+renderHost+"/"]; n != 0 {
		t.Errorf("the render host's root requested %d times before any browser node", n)
	}

	s.StartNodeWith("browser", 1, func(c *config.Config) { c.Node.Browser = "auto" })
	ctx, cancel := context.WithTimeout(bg, 3*time.Minute)
	defer cancel()
	var sum campaign.Summary
	if err := run.Get(ctx, &sum); err != nil {
		t.Fatal(err)
	}
	if missing, dup := web.Tally(); missing != 0 || dup != 0 {
		t.Errorf("%d pages never requested, %d requested twice", missing, dup)
	}
	want := int64(len(web.Pages()) + len(spa.Pages()) - 2) // spin and probe excluded
	if sum.Fetched != want || sum.Failed != 0 {
		t.Errorf("%d fetched, %d failed; want %d fetched", sum.Fetched, sum.Failed, want)
	}
	t.Logf("%d URLs waited for a browser node; then %d fetched in %.1fs", waiting, sum.Fetched, sum.Seconds)
}

// TestDrainedBrowserNodeHandsItsRenderHostToTheOther: two browser nodes
// and a plain one. The browser node that owns the render host is drained
// mid-crawl: the host moves to the other browser node (never to the plain
// one), nothing is lost and nothing fetched twice.
func TestDrainedBrowserNodeHandsItsRenderHostToTheOther(t *testing.T) {
	spa, web, spec := appBesidePlainHosts(t)
	s := harness.NewStack(t)
	withBrowser := func(c *config.Config) { c.Node.Browser = "auto" }
	b1, b2 := s.StartNodeWith("browser1", 1, withBrowser), s.StartNodeWith("browser2", 1, withBrowser)
	plain := s.StartNode("plain", 1)
	renderHost := web.Hosts()[0]
	owner, _ := ring.New(ring.Node{ID: b1, Weight: 1}, ring.Node{ID: b2, Weight: 1}).Lookup(renderHost)
	heir := map[bool]string{true: b2, false: b1}[owner == b1]

	id := "browser-drain-" + s.Name
	run, err := s.Campaigns.Start(bg, id, spec)
	if err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 2*time.Minute, "the render host's owner rendering, mid-crawl", func() bool {
		n := appPagesBy(t, s, id, renderHost, owner)
		return n >= 3
	})
	if _, err := s.Campaigns.Drain(bounded(t, time.Minute), id, owner); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg, 4*time.Minute)
	defer cancel()
	var sum campaign.Summary
	if err := run.Get(ctx, &sum); err != nil {
		t.Fatal(err)
	}
	byNode := hostPagesByNode(t, s, id, renderHost)
	if byNode[heir] == 0 || byNode[plain] != 0 {
		t.Errorf("the render host's pages by node %v: want some on %s after the drain, none on %s", byNode, heir, plain)
	}
	missing, dup := tallyWithApp(web, spa)
	if missing != 0 || dup != 0 {
		t.Errorf("%d pages never fetched, %d fetched twice", missing, dup)
	}
	t.Logf("drained %s; render host pages by node %v; %d fetched", owner, byNode, sum.Fetched)
}

// appBesidePlainHosts is a web of three hosts whose first also serves the
// app (slowly enough for a crawl to be caught mid-way), and a spec that
// renders that host's app routes with autoscroll.
func appBesidePlainHosts(t *testing.T) (*synthweb.SPA, *synthweb.Web, campaign.Spec) {
	spa := &synthweb.SPA{Views: 5, Images: 1, Items: 100}
	web := harness.StartWeb(t, synthweb.Config{
		Hosts: 3, Pages: 3 * 20, LinksPerPage: 2, Seed: 9,
		HostLatency: map[int]time.Duration{0: 50 * time.Millisecond},
		Custom:      map[int]map[string]http.HandlerFunc{0: spa.Site()},
		ExtraLinks:  map[int][]string{0: {synthweb.SPARoot}},
	})
	spec := loopbackSpec(web)
	spec.Politeness.MaxConcurrencyPerHost = 2
	spec.Scope.Exclude = []string{"/app/(spin|probe)$"}
	spec.Render = &campaign.Render{Hosts: []string{web.Hosts()[0]}, Include: []string{synthweb.RenderPattern},
		Scroll: campaign.Scroll{Steps: 40, Wait: campaign.Duration(time.Second)}}
	return spa, web, spec
}

// tallyWithApp is web.Tally with the pages of the app on its first host
// (spin and probe excluded).
func tallyWithApp(web *synthweb.Web, spa *synthweb.SPA) (missing, dup int) {
	missing, dup = web.Tally()
	hits := web.Hits()
	for _, p := range spa.Pages() {
		if p == synthweb.SPASpin || p == synthweb.SPAProbe {
			continue
		}
		switch n := hits["http://"+web.Hosts()[0]+p]; {
		case n == 0:
			missing++
		case n > 1:
			dup++
		}
	}
	return missing, dup
}

// hostPagesByNode counts the campaign's pages of host by the node that
// fetched them.
func hostPagesByNode(t *testing.T, s *harness.Stack, id, host string) map[string]int {
	t.Helper()
	by := map[string]int{}
	for u, node := range pageNodes(t, s, id) {
		if strings.Contains(u, host+"/") {
			by[node]++
		}
	}
	return by
}

// appPagesBy counts the app's pages node fetched.
func appPagesBy(t *testing.T, s *harness.Stack, id, host, node string) int {
	t.Helper()
	n := 0
	for u, by := range pageNodes(t, s, id) {
		if by == node && strings.Contains(u, host+synthweb.SPARoot) {
			n++
		}
	}
	return n
}

// rssKiB sums the resident memory of pids (VmRSS).
func rssKiB(pids []int) int64 {
	var total int64
	for _, p := range pids {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/status")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
				total += kb
			}
		}
	}
	return total
}
