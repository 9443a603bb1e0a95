package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/control"
	"github.com/spiderpool/spiderpool/tests/synthweb"
)

// Politeness efficiency is pages ÷ (seconds × bound), where the bound is
// the rate politeness allows the campaign's hosts together: per host the
// lesser of 1/min_delay and max_concurrency_per_host/latency. A crawl that
// keeps every host exactly as busy as its politeness allows scores 1.
// Every campaign seeds every host's root, so the bound holds from the first
// second, and hosts share no links, so each is a tree of its own.

// politeWeights are the nodes of every polite scenario: three processes
// weighted 1, 1 and 2, with the node defaults otherwise.
var politeWeights = []float64{1, 1, 2}

// webPlan shapes one synthetic web of a scenario.
type webPlan struct {
	hosts        int
	pagesPerHost int
	latency      time.Duration
	// slowHosts more hosts, after the others, answer in slowLatency.
	slowHosts   int
	slowLatency time.Duration
}

// start serves the web in this process: its access log, with the server's
// clock, is what duplicates, gaps and robots.txt requests are read from.
func (w webPlan) start() (*synthweb.Web, error) {
	n := w.hosts + w.slowHosts
	slow := map[int]time.Duration{}
	for h := w.hosts; h < n; h++ {
		slow[h] = w.slowLatency
	}
	return synthweb.Start(synthweb.Config{
		Hosts: n, Pages: n * w.pagesPerHost, LinksPerPage: 4, CrossHostFraction: 0, Seed: 2026,
		Latency: w.latency, HostLatency: slow,
	})
}

// campaignPlan is one campaign of a scenario over one of its webs.
type campaignPlan struct {
	name        string
	web         int // index into the scenario's webs
	minDelay    time.Duration
	concurrency int // max_concurrency_per_host
	// processor: every page also goes to the no-op processor.
	processor bool
}

// hostRate is the most pages a second politeness lets a campaign take from
// a host answering in latency.
func hostRate(minDelay time.Duration, concurrency int, latency time.Duration) float64 {
	rate := float64(concurrency) / latency.Seconds()
	if minDelay > 0 {
		rate = min(rate, 1/minDelay.Seconds())
	}
	return rate
}

// bound is the campaign's politeness bound over web w, in pages a second.
func (c campaignPlan) bound(w webPlan) float64 {
	b := float64(w.hosts) * hostRate(c.minDelay, c.concurrency, w.latency)
	if w.slowHosts > 0 {
		b += float64(w.slowHosts) * hostRate(c.minDelay, c.concurrency, w.slowLatency)
	}
	return b
}

// spec is the campaign's spec over a web whose roots are seeds.
func (c campaignPlan) spec(seeds []string, agent string) campaign.Spec {
	depth := 64 // deep enough for every page through the tree
	return campaign.Spec{
		Seeds:  seeds,
		Scope:  campaign.Scope{AllowedDomains: []string{"127.0.0.1"}},
		Limits: campaign.Limits{MaxDepth: &depth},
		Politeness: campaign.Politeness{
			UserAgent: agent, MinDelay: campaign.Duration(c.minDelay), MaxConcurrencyPerHost: c.concurrency,
		},
	}
}

type politeScenario struct {
	id        int
	title     string
	webs      []webPlan
	campaigns []campaignPlan
}

// politeScenarios are the scenarios at scale (1 = full size): host counts
// and pages per host are multiplied by it.
func politeScenarios(scale float64) []politeScenario {
	n := func(full, least int) int { return max(least, int(math.Round(float64(full)*scale))) }
	wide := webPlan{hosts: n(500, 1), pagesPerHost: n(100, 2), latency: 200 * time.Millisecond}
	withSlow := wide
	withSlow.slowHosts, withSlow.slowLatency = n(10, 1), 2*time.Second
	single := webPlan{hosts: 1, pagesPerHost: n(400, 2), latency: time.Second}
	shared := webPlan{hosts: n(50, 1), pagesPerHost: n(20, 2), latency: 200 * time.Millisecond}
	polite := campaignPlan{name: "wide", minDelay: time.Second, concurrency: 1}
	return []politeScenario{
		{id: 1, title: "many hosts, 1s apart", webs: []webPlan{wide}, campaigns: []campaignPlan{polite}},
		{id: 2, title: "many hosts and a few slow ones", webs: []webPlan{withSlow},
			campaigns: []campaignPlan{{name: "wide+slow", minDelay: time.Second, concurrency: 1}}},
		{id: 3, title: "two campaigns on the same nodes", webs: []webPlan{wide, single}, campaigns: []campaignPlan{
			polite, {name: "single host", web: 1, concurrency: 2}}},
		{id: 5, title: "two campaigns over the same hosts", webs: []webPlan{shared}, campaigns: []campaignPlan{
			{name: "delay 1s", minDelay: time.Second, concurrency: 1},
			{name: "delay 2s", minDelay: 2 * time.Second, concurrency: 1}}},
		{id: 6, title: "many hosts, 1s apart, every page to a no-op processor", webs: []webPlan{wide}, campaigns: []campaignPlan{
			{name: "wide+noop", minDelay: time.Second, concurrency: 1, processor: true}}},
	}
}

// politeRun is the polite section of results.json: one `bench polite`.
type politeRun struct {
	Date        string    `json:"date"`
	Scale       float64   `json:"scale"`
	NodeWeights []float64 `json:"node_weights"`
	// Processor is the no-op processor's settings in scenario 6.
	Processor string                 `json:"processor,omitempty"`
	Scenarios []politeScenarioResult `json:"scenarios"`
}

type politeScenarioResult struct {
	ID        int              `json:"id"`
	Title     string           `json:"title"`
	Campaigns []politeCampaign `json:"campaigns"`
	// FastHosts is the hosts at the base latency of a web with slow hosts.
	FastHosts *fastHosts `json:"fast_hosts,omitempty"`
	// SharedWeb is the web two campaigns crawl together, all agents.
	SharedWeb *sharedWeb `json:"shared_web,omitempty"`
	// CPU is what the bench's processes and all others used while the
	// campaigns ran: other processes' load makes the figures worse.
	CPU cpuUse `json:"cpu"`
}

type politeCampaign struct {
	Name        string  `json:"name"`
	Agent       string  `json:"user_agent"`
	Hosts       int     `json:"hosts"`
	WebPages    int     `json:"web_pages"`
	MinDelay    string  `json:"min_delay"`
	Concurrency int     `json:"max_concurrency_per_host"`
	Pages       int64   `json:"pages"` // fetched, from the campaign's summary
	Seconds     float64 `json:"seconds"`
	// Bound is what politeness allows the campaign, in pages a second.
	Bound      float64 `json:"bound_pages_per_second"`
	Efficiency float64 `json:"efficiency"`
	// Duplicates and Missing are from the server's log, this campaign's
	// user agent only.
	Duplicates int `json:"duplicate_fetches"`
	Missing    int `json:"pages_missed"`
	// NodeStates is every node state the status query showed while the
	// campaign ran (polled every 500ms).
	NodeStates    []string         `json:"node_states"`
	PagesPerNode  map[string]int64 `json:"pages_per_node"`
	Runs          int              `json:"workflow_runs"`
	HistoryEvents int64            `json:"history_events"` // all runs together
	EventsPer1000 float64          `json:"history_events_per_1000_pages"`
	// MinGapSeconds is the least time between two of this campaign's
	// requests to one host, by the server's clock (robots.txt included);
	// MinGapBetween names the two paths, and GapsUnderMinDelay counts the
	// gaps shorter than min_delay.
	MinGapSeconds     *float64 `json:"min_gap_seconds,omitempty"`
	MinGapBetween     string   `json:"min_gap_between,omitempty"`
	GapsUnderMinDelay int      `json:"gaps_under_min_delay"`
	RobotsRequests    int      `json:"robots_requests"`
}

type fastHosts struct {
	Hosts int     `json:"hosts"`
	Pages int     `json:"pages"` // fetched, from the server's log
	Bound float64 `json:"bound_pages_per_second"`
	// Efficiency is over the campaign's Seconds, which the slow hosts set:
	// with as many pages as the fast ones at half the rate, it cannot pass
	// about 0.5.
	Seconds    float64 `json:"seconds"`
	Efficiency float64 `json:"efficiency"`
	// SecondsToLast is from the campaign's start to the fast hosts' last
	// request; EfficiencyToLast is over that time, the fast hosts' own.
	SecondsToLast    float64 `json:"seconds_to_last"`
	EfficiencyToLast float64 `json:"efficiency_to_last"`
}

type sharedWeb struct {
	Hosts int `json:"hosts"`
	// MinGapSeconds is the least time between two requests to one host,
	// whichever campaigns sent them, while all of them ran: the strictest
	// running campaign's delay must hold then. Once one has ended, the
	// others may go at their own pace (AfterFirstEndSeconds).
	MinGapSeconds        *float64 `json:"min_gap_seconds,omitempty"`
	MinGapBetween        string   `json:"min_gap_between,omitempty"`
	AfterFirstEndSeconds *float64 `json:"min_gap_after_first_end_seconds,omitempty"`
	RobotsMaxPerHost     int      `json:"robots_max_per_host"`
	RobotsTotal          int      `json:"robots_total"`
}

// runPolite runs the politeness scenarios on the full stack.
func runPolite(args []string) error {
	fs := flag.NewFlagSet("polite", flag.ExitOnError)
	only := fs.String("only", "", "scenarios to run, e.g. 1,3 (default all: 1,2,3,5,6)")
	scale := fs.Float64("scale", 1, "multiply hosts and pages per host by this (0.1 for a quick check)")
	bin := fs.String("spiderpool", "../bin/spiderpool", "the spiderpool binary")
	out := fs.String("out", "results.json", "results file")
	fs.Parse(args)
	if *scale <= 0 {
		return fmt.Errorf("-scale must be > 0, got %g", *scale)
	}
	scenarios, err := pickScenarios(politeScenarios(*scale), *only)
	if err != nil {
		return err
	}
	st, err := startStack(*bin, nodePlan{weights: politeWeights})
	if err != nil {
		return err
	}
	defer st.stop()
	pr := &politeRun{Date: time.Now().UTC().Format(time.RFC3339), Scale: *scale, NodeWeights: politeWeights, Processor: noopSettings()}
	for _, sc := range scenarios {
		res, err := st.polite(sc)
		if err != nil {
			return fmt.Errorf("scenario %d: %w", sc.id, err)
		}
		pr.Scenarios = append(pr.Scenarios, res)
	}
	fmt.Println()
	printPolite(os.Stdout, pr)
	r := loadResults(*out)
	r.Polite = pr
	return saveResults(*out, r)
}

func pickScenarios(all []politeScenario, only string) ([]politeScenario, error) {
	if only == "" {
		return all, nil
	}
	var out []politeScenario
	for _, f := range strings.Split(only, ",") {
		id, err := strconv.Atoi(strings.TrimSpace(f))
		i := slices.IndexFunc(all, func(s politeScenario) bool { return s.id == id })
		if err != nil || i < 0 {
			return nil, fmt.Errorf("-only: no scenario %q (there are 1, 2, 3, 5 and 6)", f)
		}
		out = append(out, all[i])
	}
	return out, nil
}

// campaignRun is one campaign of a scenario while and after it runs.
type campaignRun struct {
	plan  campaignPlan
	id    string
	agent string
	web   *synthweb.Web
	start time.Time
	done  chan struct{}
	// Set when done:
	seconds float64
	ended   time.Time
	sum     campaign.Summary
	err     error
	// Set by the watcher:
	states map[string]bool
}

// polite runs one scenario on fresh nodes: its webs, then its campaigns
// started together, watched until each returns its result.
func (s *stack) polite(sc politeScenario) (politeScenarioResult, error) {
	ctx := context.Background()
	res := politeScenarioResult{ID: sc.id, Title: sc.title}
	webs, closeWebs, err := startWebs(sc.webs)
	if err != nil {
		return res, err
	}
	defer closeWebs()
	nodes, err := s.startNodes()
	if err != nil {
		return res, err
	}
	defer nodes.stop()

	var noop []campaign.Processor
	if slices.ContainsFunc(sc.campaigns, func(c campaignPlan) bool { return c.processor }) {
		p, stop := nodes.runNoop()
		defer stop()
		noop = []campaign.Processor{p}
	}
	fmt.Printf("scenario %d: %s\n", sc.id, sc.title)
	began, cpu := time.Now(), sampleCPU()
	runs := make([]*campaignRun, len(sc.campaigns))
	var watchers sync.WaitGroup
	for i, cp := range sc.campaigns {
		c := &campaignRun{plan: cp, web: webs[cp.web], done: make(chan struct{}), states: map[string]bool{},
			id: fmt.Sprintf("polite%d-s%d-c%d", nodes.n, sc.id, i+1), agent: fmt.Sprintf("spiderpool-bench-%d/1.0", i+1)}
		runs[i] = c
		if err := c.begin(ctx, nodes, sc.webs[cp.web], noop); err != nil {
			return res, err
		}
		watchers.Go(func() { c.watch(ctx, nodes.campaigns) })
	}
	watchers.Wait()
	res.CPU = cpuBetween(cpu, sampleCPU(), time.Since(began).Seconds())
	for _, c := range runs {
		if c.err != nil {
			return res, fmt.Errorf("campaign %s: %w", c.id, c.err)
		}
		fmt.Printf("  %-12s %d pages in %.1fs\n", c.plan.name, c.sum.Fetched, c.seconds)
	}
	// Read-only work on the server's side waits until every campaign of
	// the scenario is over, so it takes no CPU from a running one.
	for _, c := range runs {
		pc, err := c.result(ctx, nodes, sc.webs[c.plan.web])
		if err != nil {
			return res, err
		}
		res.Campaigns = append(res.Campaigns, pc)
	}
	res.measureWebs(sc.webs, webs, runs)
	return res, nil
}

// startWebs starts a web of each plan; closeAll closes those started.
func startWebs(plans []webPlan) (webs []*synthweb.Web, closeAll func(), err error) {
	closeAll = func() {
		for _, w := range webs {
			w.Close()
		}
	}
	for _, wp := range plans {
		w, err := wp.start()
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		webs = append(webs, w)
	}
	return webs, closeAll, nil
}

// begin starts the campaign over wp's web, every page to the noop
// processors if its plan has a processor, and collects its result when it
// ends (done).
func (c *campaignRun) begin(ctx context.Context, nodes *nodeSet, wp webPlan, noop []campaign.Processor) error {
	cp := c.plan
	fmt.Printf("  %-12s %d hosts x %d pages, min_delay %v, concurrency %d: bound %.1f pages/s\n",
		cp.name, wp.hosts+wp.slowHosts, wp.pagesPerHost, cp.minDelay, cp.concurrency, cp.bound(wp))
	c.start = time.Now()
	spec := cp.spec(c.web.Roots(), c.agent)
	if cp.processor {
		spec.Processors = noop
	}
	wr, err := nodes.campaigns.Start(ctx, c.id, spec)
	if err != nil {
		return err
	}
	go func() {
		defer close(c.done)
		c.err = wr.Get(ctx, &c.sum)
		c.ended = time.Now()
		c.seconds = c.ended.Sub(c.start).Seconds()
	}()
	return nil
}

// measureWebs sets what the scenario's webs show: how fast the fast hosts
// of a web with slow ones were crawled, and how campaigns sharing a web
// shared it until the first of them ended.
func (res *politeScenarioResult) measureWebs(plans []webPlan, webs []*synthweb.Web, runs []*campaignRun) {
	for i, wp := range plans {
		on := campaignsOn(runs, i)
		if wp.slowHosts > 0 {
			res.FastHosts = fastHostsOf(wp, on[0])
		}
		if len(on) > 1 {
			firstEnd := on[0].ended
			for _, c := range on[1:] {
				if c.ended.Before(firstEnd) {
					firstEnd = c.ended
				}
			}
			res.SharedWeb = sharedWebOf(webs[i], firstEnd)
		}
	}
}

// watch polls the campaign's status every 500ms until it ends, noting each
// node state it sees.
func (c *campaignRun) watch(ctx context.Context, cs *control.Campaigns) {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if st, err := cs.Status(qctx, c.id); err == nil {
			c.observe(st)
		}
		cancel()
		select {
		case <-c.done:
			return
		case <-tick.C:
		}
	}
}

func (c *campaignRun) observe(st campaign.Status) {
	for _, n := range st.Nodes {
		c.states[n.State] = true
	}
}

// result measures a finished campaign: its summary, its last status, its
// histories and the server's log of its user agent.
func (c *campaignRun) result(ctx context.Context, nodes *nodeSet, wp webPlan) (politeCampaign, error) {
	// The node states of the last half second before the end: a closed
	// workflow still answers queries.
	qctx, cancel := context.WithTimeout(ctx, time.Minute)
	if st, err := nodes.campaigns.Status(qctx, c.id); err == nil {
		c.observe(st)
	}
	cancel()
	lengths, err := runHistories(ctx, nodes.client, c.id, c.sum.Runs)
	if err != nil {
		return politeCampaign{}, err
	}
	pc := politeCampaign{
		Name: c.plan.name, Agent: c.agent, Hosts: wp.hosts + wp.slowHosts, WebPages: len(c.web.Pages()),
		MinDelay: c.plan.minDelay.String(), Concurrency: c.plan.concurrency,
		Pages: c.sum.Fetched, Seconds: c.seconds, Bound: c.plan.bound(wp),
		PagesPerNode: c.sum.PerNode, Runs: len(lengths),
	}
	pc.Efficiency = float64(pc.Pages) / (pc.Seconds * pc.Bound)
	pc.Missing, pc.Duplicates = c.web.TallyAgent(c.agent)
	for s := range c.states {
		pc.NodeStates = append(pc.NodeStates, s)
	}
	slices.Sort(pc.NodeStates)
	for _, n := range lengths {
		pc.HistoryEvents += n
	}
	if pc.Pages > 0 {
		pc.EventsPer1000 = float64(pc.HistoryEvents) * 1000 / float64(pc.Pages)
	}
	all := noGaps()
	for _, h := range c.web.Hosts() {
		var mine []synthweb.Request
		for _, r := range c.web.Log(h) {
			if r.Agent == c.agent {
				mine = append(mine, r)
			}
		}
		all.add(gapsOf(mine, c.plan.minDelay))
		pc.RobotsRequests += robotsRequests(mine)
	}
	pc.MinGapSeconds, pc.MinGapBetween, pc.GapsUnderMinDelay = seconds(all.least), all.between, all.under
	return pc, nil
}

// gaps describes the times between consecutive requests to a host.
type gaps struct {
	least   time.Duration // MaxInt64 when no two requests were seen
	between string        // the paths of the two requests least apart
	under   int           // gaps shorter than the min_delay asked for
}

func noGaps() gaps { return gaps{least: math.MaxInt64} }

func (g *gaps) add(o gaps) {
	if o.least < g.least {
		g.least, g.between = o.least, o.between
	}
	g.under += o.under
}

// gapsOf measures the gaps between a host's requests, by arrival.
func gapsOf(log []synthweb.Request, minDelay time.Duration) gaps {
	log = slices.Clone(log)
	slices.SortFunc(log, func(a, b synthweb.Request) int { return a.At.Compare(b.At) })
	g := noGaps()
	for i := 1; i < len(log); i++ {
		d := log[i].At.Sub(log[i-1].At)
		if d < g.least {
			g.least, g.between = d, log[i-1].Path+" -> "+log[i].Path
		}
		if d < minDelay {
			g.under++
		}
	}
	return g
}

func robotsRequests(log []synthweb.Request) int {
	n := 0
	for _, r := range log {
		if r.Path == "/robots.txt" {
			n++
		}
	}
	return n
}

// seconds is d in seconds, or nil for "no gap seen".
func seconds(d time.Duration) *float64 {
	if d == math.MaxInt64 {
		return nil
	}
	s := d.Seconds()
	return &s
}

func campaignsOn(runs []*campaignRun, web int) []*campaignRun {
	var out []*campaignRun
	for _, c := range runs {
		if c.plan.web == web {
			out = append(out, c)
		}
	}
	return out
}

// fastHostsOf measures the hosts at the base latency of a web with slow
// hosts (the first wp.hosts of it), for campaign c crawling it.
func fastHostsOf(wp webPlan, c *campaignRun) *fastHosts {
	fast := map[string]bool{}
	for _, h := range c.web.Hosts()[:wp.hosts] {
		fast[h] = true
	}
	hits := c.web.HitsBy(c.agent)
	f := &fastHosts{Hosts: wp.hosts, Seconds: c.seconds,
		Bound: float64(wp.hosts) * hostRate(c.plan.minDelay, c.plan.concurrency, wp.latency)}
	for _, p := range c.web.Pages() {
		host, _, _ := strings.Cut(strings.TrimPrefix(p, "http://"), "/")
		if hits[p] > 0 && fast[host] {
			f.Pages++
		}
	}
	var last time.Time
	for h := range fast {
		for _, r := range c.web.Log(h) {
			if r.Agent == c.agent && r.At.After(last) {
				last = r.At
			}
		}
	}
	f.Efficiency = float64(f.Pages) / (f.Seconds * f.Bound)
	if f.SecondsToLast = last.Sub(c.start).Seconds(); f.SecondsToLast > 0 {
		f.EfficiencyToLast = float64(f.Pages) / (f.SecondsToLast * f.Bound)
	}
	return f
}

// sharedWebOf measures the requests to a web several campaigns crawl: the
// least gap between two requests to a host, whoever sent them, and how
// often each host's robots.txt was asked for.
func sharedWebOf(web *synthweb.Web, firstEnd time.Time) *sharedWeb {
	sw := &sharedWeb{Hosts: len(web.Hosts())}
	all, after := noGaps(), noGaps()
	for _, h := range web.Hosts() {
		log := web.Log(h)
		var both, rest []synthweb.Request
		for _, r := range log {
			if r.At.Before(firstEnd) {
				both = append(both, r)
			} else {
				rest = append(rest, r)
			}
		}
		all.add(gapsOf(both, 0))
		after.add(gapsOf(rest, 0))
		n := robotsRequests(log)
		sw.RobotsTotal += n
		sw.RobotsMaxPerHost = max(sw.RobotsMaxPerHost, n)
	}
	sw.MinGapSeconds, sw.MinGapBetween = seconds(all.least), all.between
	sw.AfterFirstEndSeconds = seconds(after.least)
	return sw
}

// printPolite writes the summary table.
func printPolite(w io.Writer, pr *politeRun) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "scenario\tcampaign\thosts\tpages\tseconds\tbound/s\tpages/s\tefficiency\tdups\tmissed\tnode states\truns\tevents\tevents/1k pages\tmin gap\tgaps < min_delay\t\n")
	for _, sc := range pr.Scenarios {
		for _, c := range sc.Campaigns {
			fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%.1f\t%.1f\t%.1f\t%.1f%%\t%d\t%d\t%s\t%d\t%d\t%.0f\t%s\t%d\t\n",
				sc.ID, c.Name, c.Hosts, c.Pages, c.Seconds, c.Bound, float64(c.Pages)/c.Seconds, 100*c.Efficiency,
				c.Duplicates, c.Missing, strings.Join(c.NodeStates, ","), c.Runs, c.HistoryEvents,
				c.EventsPer1000, gapText(c.MinGapSeconds), c.GapsUnderMinDelay)
		}
	}
	tw.Flush()
	for _, sc := range pr.Scenarios {
		for _, c := range sc.Campaigns {
			if c.GapsUnderMinDelay > 0 {
				fmt.Fprintf(w, "scenario %d: %s: %d gaps between its requests to a host shorter than its min_delay %s; the least %s, %s\n",
					sc.ID, c.Name, c.GapsUnderMinDelay, c.MinDelay, gapText(c.MinGapSeconds), c.MinGapBetween)
			}
		}
		for _, line := range politeNotes(sc) {
			fmt.Fprintf(w, "scenario %d: %s\n", sc.ID, line)
		}
	}
	if pr.Scale != 1 {
		fmt.Fprintf(w, "(scaled: hosts and pages per host x%g)\n", pr.Scale)
	}
}

// politeNotes are a scenario's figures beyond the per-campaign ones.
func politeNotes(sc politeScenarioResult) []string {
	var out []string
	if f := sc.FastHosts; f != nil {
		out = append(out, fmt.Sprintf("the %d fast hosts: %d pages, %.1f%% of their bound over the campaign's %.1fs, %.1f%% over the %.1fs to their last request",
			f.Hosts, f.Pages, 100*f.Efficiency, f.Seconds, 100*f.EfficiencyToLast, f.SecondsToLast))
	}
	if u := sc.CPU; u.Seconds > 0 {
		capacity := u.Seconds * float64(u.Cores)
		out = append(out, fmt.Sprintf("CPU over the %.0fs the campaigns ran: the bench (web, Postgres, Temporal, nodes) %.0fs, %.0f%% of the %d cores; other processes %.0fs, %.0f%%",
			u.Seconds, u.Bench, 100*u.Bench/capacity, u.Cores, u.Others, 100*u.Others/capacity))
	}
	if w := sc.SharedWeb; w != nil {
		var dups []string
		for _, c := range sc.Campaigns {
			dups = append(dups, fmt.Sprintf("%s %d", c.Name, c.Duplicates))
		}
		out = append(out, fmt.Sprintf("the shared %d hosts: least gap between two requests to a host while both campaigns ran %s (all agents, %s), after the first ended %s; robots.txt asked %d times in all, at most %d times of one host; duplicates %s",
			w.Hosts, gapText(w.MinGapSeconds), w.MinGapBetween, gapText(w.AfterFirstEndSeconds), w.RobotsTotal, w.RobotsMaxPerHost, strings.Join(dups, ", ")))
	}
	return out
}

func gapText(s *float64) string {
	if s == nil {
		return "-"
	}
	return fmt.Sprintf("%.3fs", *s)
}
