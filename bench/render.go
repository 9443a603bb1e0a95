package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/tests/synthweb"
)

// `bench render` crawls the synthetic single-page app (tests/synthweb's
// SPA: router-built links, fetch() data, lazy images, an infinite feed)
// with one spiderpool browser node and with Crawlee's PuppeteerCrawler,
// in the same run on the same site, both rendering every page in Debian's
// Chromium with the same number of pages at once, waiting for the network
// to go idle and scrolling. The site's log says what each requested: the
// pages found and the duplicates.

// renderRun is the render section of results.json.
type renderRun struct {
	Date string     `json:"date"`
	Site renderSite `json:"site"`
	// Tabs is pages rendered at once: the node's --browser-tabs and
	// max_concurrency_per_host, Crawlee's min and max concurrency.
	Tabs     int            `json:"tabs"`
	Settings renderSettings `json:"settings"`
	Pairs    []renderPair   `json:"pairs"`
	// Ratio is median(spiderpool pages/s) / median(Crawlee pages/s).
	Ratio float64 `json:"ratio"`
	// MemoryRatio is median(spiderpool peak PSS) / median(Crawlee's).
	MemoryRatio float64 `json:"memory_ratio"`
}

type renderSite struct {
	Views     int `json:"views"`
	Images    int `json:"images_per_view"`
	Items     int `json:"feed_items"`
	Pages     int `json:"pages"`
	Resources int `json:"resources"`
}

// renderSettings say how each crawler renders, in words.
type renderSettings struct {
	Chromium   string `json:"chromium"`
	Spiderpool string `json:"spiderpool"`
	Crawlee    string `json:"crawlee"`
	Memory     string `json:"memory"`
}

type renderPair struct {
	First      string         `json:"first"` // which crawler ran first in the pair
	Spiderpool renderMeasured `json:"spiderpool"`
	Crawlee    renderMeasured `json:"crawlee"`
}

type renderMeasured struct {
	// Pages and Failed are as the crawler counts them: pages rendered
	// (spiderpool: fetched) and pages given up on.
	Pages          int64   `json:"pages"`
	Failed         int64   `json:"failed"`
	Seconds        float64 `json:"seconds"`
	PagesPerSecond float64 `json:"pages_per_second"`
	siteLog
	// Memory is the crawler's process tree: the node or Node.js, and the
	// Chromium processes below it.
	Memory memPeak `json:"memory"`
	// Stack is spiderpool's Postgres and Temporal dev server, beside the
	// node (spiderpool only).
	Stack *memPeak `json:"stack_memory,omitempty"`
	// OtherCPUSeconds is the machine's CPU the bench could not attribute
	// to its own processes while the crawl ran: other processes (a shared
	// machine's load), and processes whose time reached none of the
	// bench's when they ended (likely Chromium's renderers, one per page:
	// this is an upper bound of the load from outside).
	OtherCPUSeconds float64 `json:"other_cpu_seconds"`
}

// runRender runs the pairs and writes the results.
func runRender(args []string) error {
	fs := flag.NewFlagSet("render", flag.ExitOnError)
	bin := fs.String("spiderpool", "../bin/spiderpool", "the spiderpool binary")
	chromium := fs.String("chromium", "/usr/bin/chromium", "the Chromium both crawlers run")
	crawleeDir := fs.String("crawlee", "crawlee", "the directory of crawl.mjs, its node_modules installed")
	tabs := fs.Int("tabs", 2, "pages rendered at once by each crawler")
	pairs := fs.Int("pairs", 1, "spiderpool/Crawlee pairs; each pair after the first swaps which goes first")
	only := fs.String("only", "", "spiderpool or crawlee: crawl with that one alone (a quick look; writes nothing)")
	out := fs.String("out", "results.json", "results file")
	spa := &synthweb.SPA{NoTraps: true}
	fs.IntVar(&spa.Views, "views", 5, "views of the app, each a page with a JSON document and lazy images")
	fs.IntVar(&spa.Images, "images", 3, "lazy images per view")
	fs.IntVar(&spa.Items, "items", 200, "items of the app's feed, each a page")
	fs.Parse(args)
	if *tabs < 1 || *pairs < 1 {
		return fmt.Errorf("-tabs and -pairs must be at least 1, got %d and %d", *tabs, *pairs)
	}
	b := &renderBench{spa: spa, tabs: *tabs, chromium: *chromium, crawleeDir: *crawleeDir}
	if err := b.start(*bin, *only); err != nil {
		return err
	}
	defer b.stop()
	rr := &renderRun{Date: time.Now().UTC().Format(time.RFC3339), Tabs: *tabs, Settings: b.settings(),
		Site: renderSite{Views: spa.Views, Images: spa.Images, Items: spa.Items, Pages: len(spa.Pages()), Resources: len(spa.Resources())}}
	fmt.Printf("render: the app's %d pages and %d resources, %d tabs each\n  spiderpool: %s\n  Crawlee: %s\n",
		rr.Site.Pages, rr.Site.Resources, rr.Tabs, rr.Settings.Spiderpool, rr.Settings.Crawlee)
	for i := range *pairs {
		p, err := b.pair(i, *only)
		if err != nil {
			return fmt.Errorf("pair %d: %w", i+1, err)
		}
		rr.Pairs = append(rr.Pairs, p)
	}
	if *only != "" {
		return nil
	}
	rr.summarize()
	printRender(os.Stdout, rr)
	r := loadResults(*out)
	r.Render = rr
	return saveResults(*out, r)
}

// renderBench is the site and the spiderpool stack a run shares.
type renderBench struct {
	spa        *synthweb.SPA
	tabs       int
	chromium   string
	crawleeDir string
	web        *synthweb.Web
	stack      *stack // nil when only Crawlee crawls
	version    string // Chromium's
}

// start serves the app, starts the stack (unless only Crawlee crawls) and
// runs Chromium once, so that neither crawler pays for reading it from
// disk.
func (b *renderBench) start(bin, only string) error {
	if only != "" && only != "spiderpool" && only != "crawlee" {
		return fmt.Errorf("-only: want spiderpool or crawlee, got %q", only)
	}
	if _, err := os.Stat(b.crawleeDir + "/node_modules/crawlee"); err != nil && only != "spiderpool" {
		return fmt.Errorf("crawlee is not installed in %s (npm ci there): %w", b.crawleeDir, err)
	}
	version, err := warmChromium(b.chromium)
	if err != nil {
		return err
	}
	b.version = version
	web, err := synthweb.Start(synthweb.Config{Hosts: 1, Pages: 1, Custom: map[int]map[string]http.HandlerFunc{0: b.spa.Site()}})
	if err != nil {
		return err
	}
	b.web = web
	if only == "crawlee" {
		return nil
	}
	flags := []string{"--browser", b.chromium, "--browser-tabs", fmt.Sprint(b.tabs)}
	if b.stack, err = startStack(bin, nodePlan{weights: []float64{1}, flags: flags}); err != nil {
		web.Close()
	}
	return err
}

func (b *renderBench) stop() {
	if b.stack != nil {
		b.stack.stop()
	}
	b.web.Close()
}

// warmChromium runs Chromium once, headless on a blank page, and returns
// its version.
func warmChromium(path string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	v, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("chromium %s --version: %w", path, err)
	}
	err = exec.CommandContext(ctx, path, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", "about:blank").Run()
	if err != nil {
		return "", fmt.Errorf("chromium %s, a blank page: %w", path, err)
	}
	return strings.TrimSpace(string(v)), nil
}

// seed is the app's home on the web's only host.
func (b *renderBench) seed() string { return "http://" + b.web.Hosts()[0] + synthweb.SPARoot }

// pair crawls with both (or the one of only), the first pair spiderpool
// first, each later one swapped.
func (b *renderBench) pair(i int, only string) (renderPair, error) {
	p := renderPair{First: "spiderpool"}
	order := []string{"spiderpool", "crawlee"}
	if i%2 == 1 {
		p.First, order = "crawlee", []string{"crawlee", "spiderpool"}
	}
	for _, who := range order {
		if only != "" && who != only {
			continue
		}
		b.web.Reset()
		crawl, into := b.spiderpool, &p.Spiderpool
		if who == "crawlee" {
			crawl, into = b.crawlee, &p.Crawlee
		}
		began, cpu := time.Now(), sampleCPU()
		m, err := crawl()
		if err != nil {
			return p, fmt.Errorf("%s: %w", who, err)
		}
		m.OtherCPUSeconds = cpuBetween(cpu, sampleCPU(), time.Since(began).Seconds()).Others
		*into = m
		fmt.Printf("  %-10s %s\n", who, m.line())
	}
	return p, nil
}

// line is one crawl's figures, as printed.
func (m renderMeasured) line() string {
	s := fmt.Sprintf("%d pages (%d failed) in %.1fs = %.2f pages/s; found %d of the app's pages; %d duplicate URLs (%d extra requests); app.js %d times; peak PSS %.0f MiB (RSS %.0f MiB, %d processes)",
		m.Pages, m.Failed, m.Seconds, m.PagesPerSecond, m.Found, m.DuplicateURLs, m.ExtraRequests, m.ScriptLoads,
		m.Memory.PSSMB, m.Memory.RSSMB, m.Memory.Processes)
	s += fmt.Sprintf("; unattributed %.0f CPU-s", m.OtherCPUSeconds)
	s += fmt.Sprintf("; page requests from %.1fs to %.1fs, ended %.1fs after the last; longest gaps %s",
		m.FirstPage, m.LastPage, m.Seconds-m.LastPage, strings.Join(m.LongestGaps, ", "))
	s += fmt.Sprintf("; CPU-s: crawler %.1f, Chromium %.1f", m.Memory.RootCPUSeconds, m.Memory.CPUSeconds-m.Memory.RootCPUSeconds)
	if m.Stack != nil {
		s += fmt.Sprintf(", Postgres + Temporal %.1f (%.0f MiB PSS)", m.Stack.CPUSeconds, m.Stack.PSSMB)
	}
	return s
}

// summarize sets the ratios of the medians.
func (rr *renderRun) summarize() {
	var sp, cr, spMem, crMem []float64
	for _, p := range rr.Pairs {
		sp, cr = append(sp, p.Spiderpool.PagesPerSecond), append(cr, p.Crawlee.PagesPerSecond)
		spMem, crMem = append(spMem, p.Spiderpool.Memory.PSSMB), append(crMem, p.Crawlee.Memory.PSSMB)
	}
	if c := median(cr); c > 0 {
		rr.Ratio = median(sp) / c
	}
	if c := median(crMem); c > 0 {
		rr.MemoryRatio = median(spMem) / c
	}
}

var errNoPages = errors.New("no page rendered")

// measured completes m from its crawl's pages, start and seconds and the
// site's log.
func (b *renderBench) measured(m renderMeasured, start time.Time) (renderMeasured, error) {
	m.siteLog = tallySite(b.spa, "http://"+b.web.Hosts()[0], b.web.Hits())
	m.pageTimes = timesOf(b.spa, b.web.Log(b.web.Hosts()[0]), start)
	if m.Seconds > 0 {
		m.PagesPerSecond = float64(m.Pages) / m.Seconds
	}
	if m.Pages == 0 {
		return m, errNoPages
	}
	return m, nil
}

// renderSpec is the campaign of a spiderpool render crawl of the app.
func (b *renderBench) renderSpec() campaign.Spec {
	host := b.web.Hosts()[0]
	return campaign.Spec{
		Seeds:      []string{b.seed()},
		Scope:      campaign.Scope{AllowedDomains: []string{"127.0.0.1"}},
		Politeness: campaign.Politeness{MaxConcurrencyPerHost: b.tabs},
		Render: &campaign.Render{
			Hosts:  []string{host},
			Wait:   campaign.RenderWaitNetworkIdle,
			Scroll: campaign.Scroll{Steps: renderScrollSteps},
		},
	}
}

// renderScrollSteps caps a page's scroll steps: the feed's 200 items take
// about a dozen screens; a render stops scrolling once the page grows no
// more.
const renderScrollSteps = 60

func (b *renderBench) settings() renderSettings {
	return renderSettings{
		Chromium: b.version,
		Spiderpool: fmt.Sprintf("1 node, --browser-tabs %d, max_concurrency_per_host %d, its window 1280x900 (viewport 1280x813); render every page: wait network_idle (no request for 500ms, idle_cap 5s), scroll a screen a step up to %d steps, each waiting for the network to go idle (at most 2s), until the page grows no more",
			b.tabs, b.tabs, renderScrollSteps),
		Crawlee: fmt.Sprintf("%s; min and max concurrency %d, waitUntil networkidle0 (no connection for 500ms), puppeteerUtils.infiniteScroll({waitForSecs: 1}), enqueueLinks() (same hostname), viewport 1280x813 as spiderpool's and so no fingerprints (they pick a screen per page); defaults otherwise (one browser context, 3 retries)",
			crawleeVersions(b.crawleeDir), b.tabs),
		Memory: "peak of the sum over the crawler's process tree (node or Node.js, and Chromium's processes): RSS sampled every 100ms (a page shared by several processes counted in each); PSS from /proc/PID/smaps_rollup (a shared page counted once across the tree), read at each new RSS high and at least every second",
	}
}

// crawleeVersions names the installed crawlee and puppeteer-core.
func crawleeVersions(dir string) string {
	v := func(pkg string) string {
		b, err := os.ReadFile(dir + "/node_modules/" + pkg + "/package.json")
		if err != nil {
			return pkg + " (not installed)"
		}
		var meta struct{ Version string }
		if json.Unmarshal(b, &meta) != nil {
			return pkg
		}
		return pkg + " " + meta.Version
	}
	return v("crawlee") + " PuppeteerCrawler, " + v("puppeteer-core")
}

// siteLog is what the site's log says of one crawl.
type siteLog struct {
	// Found is the app's pages requested at least once; Missed names
	// the others.
	Found  int      `json:"pages_found"`
	Missed []string `json:"pages_missed,omitempty"`
	// DuplicateURLs counts the app's pages and resources requested more
	// than once, ExtraRequests the requests beyond the first of each;
	// Duplicates names them, with their counts.
	DuplicateURLs int      `json:"duplicate_urls"`
	ExtraRequests int      `json:"extra_requests"`
	Duplicates    []string `json:"duplicates,omitempty"`
	// ResourcesFound is the app's resources requested at least once.
	ResourcesFound int `json:"resources_found"`
	// ScriptLoads is how often the app's script was requested: once per
	// rendered page, for a browser that does not cache it (the app sends
	// no cache headers).
	ScriptLoads int `json:"script_loads"`
	// Other is requests for anything else (robots.txt, a favicon), by
	// path.
	Other map[string]int `json:"other_requests,omitempty"`
	pageTimes
}

// pageTimes are when the app's pages were requested, in seconds from the
// crawl's start: where a crawl waited before its first page, between two
// pages and after its last.
type pageTimes struct {
	FirstPage float64 `json:"first_page_request_seconds"`
	LastPage  float64 `json:"last_page_request_seconds"`
	// LongestGaps are the longest times between two page requests in a
	// row, with the page that ended each.
	LongestGaps []string `json:"longest_gaps,omitempty"`
}

// timesOf reads the page requests of log from start.
func timesOf(spa *synthweb.SPA, log []synthweb.Request, start time.Time) pageTimes {
	page := map[string]bool{}
	for _, p := range spa.Pages() {
		page[p] = true
	}
	type gap struct {
		d    time.Duration
		path string
	}
	var t pageTimes
	var gaps []gap
	var last time.Time
	for _, r := range log { // in arrival order
		if !page[r.Path] {
			continue
		}
		if last.IsZero() {
			t.FirstPage = r.At.Sub(start).Seconds()
		} else {
			gaps = append(gaps, gap{r.At.Sub(last), r.Path})
		}
		last = r.At
	}
	if !last.IsZero() {
		t.LastPage = last.Sub(start).Seconds()
	}
	slices.SortFunc(gaps, func(a, b gap) int { return cmp.Compare(b.d, a.d) })
	for _, g := range gaps[:min(len(gaps), 3)] {
		t.LongestGaps = append(t.LongestGaps, fmt.Sprintf("%.1fs before %s", g.d.Seconds(), g.path))
	}
	return t
}

// tallySite reads the site's hits (by URL, base + path) against the app.
func tallySite(spa *synthweb.SPA, base string, hits map[string]int) siteLog {
	var s siteLog
	known := map[string]bool{}
	count := func(path string, page bool) {
		known[base+path] = true
		n := hits[base+path]
		switch {
		case n == 0 && page:
			s.Missed = append(s.Missed, path)
		case n > 1:
			s.DuplicateURLs++
			s.ExtraRequests += n - 1
			s.Duplicates = append(s.Duplicates, fmt.Sprintf("%s x%d", path, n))
		}
		if n > 0 && page {
			s.Found++
		}
		if n > 0 && !page {
			s.ResourcesFound++
		}
	}
	for _, p := range spa.Pages() {
		count(p, true)
	}
	for _, r := range spa.Resources() {
		count(r, false)
	}
	script := base + synthweb.SPARoot + "app.js"
	s.ScriptLoads, known[script] = hits[script], true
	for u, n := range hits {
		if !known[u] {
			if s.Other == nil {
				s.Other = map[string]int{}
			}
			s.Other[strings.TrimPrefix(u, base)] += n
		}
	}
	slices.Sort(s.Duplicates)
	return s
}
