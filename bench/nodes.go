package main

import (
	"bytes"
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/control"
	"github.com/spiderpool/spiderpool/tests/synthweb"
)

// `bench nodes` measures one polite campaign on pools of nodes from 3 to
// 1,000: the politeness bound it reaches, what it costs the campaign's
// Temporal history and Postgres per page, and what each kind of process
// spends. The pool is reached as a deployment reaches it: a stock Postgres
// (max_connections 100) behind PgBouncer in transaction pooling, the
// Temporal dev server, and node processes with the node defaults (no
// --db-conns), each running --replicas node identities.

// poolPlan is one pool of a `bench nodes` run.
type poolPlan struct {
	Name     string `json:"name"`
	Procs    int    `json:"processes"`
	Replicas int    `json:"replicas_per_process"`
}

func (p poolPlan) identities() int { return p.Procs * max(p.Replicas, 1) }

func (p poolPlan) nodes() nodePlan {
	np := nodePlan{replicas: p.Replicas}
	for range p.Procs {
		np.weights = append(np.weights, 1)
	}
	return np
}

var poolPlans = []poolPlan{
	{Name: "3 nodes", Procs: 3, Replicas: 1},
	{Name: "48 nodes", Procs: 48, Replicas: 1},
	{Name: "100 replicas", Procs: 1, Replicas: 100},
	{Name: "300 replicas", Procs: 3, Replicas: 100},
	{Name: "1000 replicas", Procs: 10, Replicas: 100},
}

// poolCampaign is a campaign of the run, with its web.
type poolCampaign struct {
	web  webPlan
	plan campaignPlan
}

// poolCampaigns are the campaigns each pool crawls, one at a time: 400
// hosts a second apart (the campaign of issue 30's table), and 2,000 hosts
// five seconds apart (more hosts than some pools have nodes, at the same
// bound of 400 pages a second).
func poolCampaigns(scale float64) []poolCampaign {
	n := func(full, least int) int { return max(least, int(math.Round(float64(full)*scale))) }
	return []poolCampaign{
		{web: webPlan{hosts: n(400, 1), pagesPerHost: n(100, 2), latency: 50 * time.Millisecond},
			plan: campaignPlan{name: "400 hosts", minDelay: time.Second, concurrency: 1}},
		{web: webPlan{hosts: n(2000, 1), pagesPerHost: n(20, 2), latency: 50 * time.Millisecond},
			plan: campaignPlan{name: "2000 hosts", minDelay: 5 * time.Second, concurrency: 1}},
	}
}

// nodesRun is the nodes section of results.json: one `bench nodes`.
type nodesRun struct {
	Date    string       `json:"date"`
	Scale   float64      `json:"scale"`
	Results []poolResult `json:"results"`
	Kill    *killResult  `json:"kill,omitempty"`
	Drain   *drainResult `json:"drain,omitempty"`
}

type poolResult struct {
	Pool        poolPlan `json:"pool"`
	Identities  int      `json:"identities"`
	Campaign    string   `json:"campaign"`
	Hosts       int      `json:"hosts"`
	WebPages    int      `json:"web_pages"`
	MinDelay    string   `json:"min_delay"`
	Bound       float64  `json:"bound_pages_per_second"`
	Pages       int64    `json:"pages"`
	Seconds     float64  `json:"seconds"`
	Efficiency  float64  `json:"efficiency"`
	Duplicates  int      `json:"duplicate_fetches"`
	Missing     int      `json:"pages_missed"`
	LeasedAgain int64    `json:"urls_leased_again"`
	Batches     int64    `json:"batches"`
	// Runs, Events, Activities and LocalActivities are over every run of
	// the campaign and every child workflow.
	Runs              int     `json:"workflow_runs"`
	Events            int     `json:"history_events"`
	Activities        int     `json:"activities"`
	LocalActivities   int     `json:"local_activities"`
	EventsPer1000     float64 `json:"history_events_per_1000_pages"`
	ActivitiesPer1000 float64 `json:"activities_per_1000_pages"`
	LocalPer1000      float64 `json:"local_activities_per_1000_pages"`
	// TaskTimeouts and TaskFailures are the campaign's workflow tasks that
	// timed out or failed; StallSeconds the longest quiet in its history
	// (no event), beginning StallAt seconds after its start.
	TaskTimeouts int     `json:"workflow_task_timeouts"`
	TaskFailures int     `json:"workflow_task_failures"`
	StallSeconds float64 `json:"longest_history_stall_seconds"`
	StallAt      float64 `json:"longest_history_stall_at_seconds"`
	// WorkflowTask and Lease are latencies from the nodes' SDK metrics, in
	// milliseconds: a campaign workflow task's execution, and a LeaseHosts
	// local activity's.
	WorkflowTask latency `json:"workflow_task_ms"`
	Lease        latency `json:"lease_ms"`
	// PGConnections is the most client connections the Postgres server
	// had (pg_stat_activity, sampled every 250 ms), PGRefused the
	// connections it refused (its log's "too many clients").
	PGConnections int `json:"pg_connections_max"`
	PGRefused     int `json:"pg_connections_refused"`
	// PGXactsPer1000 and PGRowsPer1000 are the transactions committed and
	// the rows inserted, updated or deleted in the campaign's database
	// while it ran (pg_stat_database), per 1,000 pages: Postgres's work
	// per page, for the arithmetic in docs/pool.md.
	PGXactsPer1000 float64 `json:"pg_transactions_per_1000_pages"`
	PGRowsPer1000  float64 `json:"pg_rows_written_per_1000_pages"`
	// CPU is CPU seconds while the campaign ran, by kind of process.
	CPU map[string]float64 `json:"cpu_seconds"`
	// RSSPerNode is the node processes' peak resident sets, summed, over
	// the node identities, in MiB; RSSPerProcess over the processes.
	RSSPerNode    float64 `json:"rss_per_node_mib"`
	RSSPerProcess float64 `json:"rss_per_process_mib"`
}

type latency struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	N   uint64  `json:"count"`
}

// killResult is kill -9 of one process of a pool mid-crawl.
type killResult struct {
	Pool       poolPlan `json:"pool"`
	Campaign   string   `json:"campaign"`
	Killed     int      `json:"identities_killed"`
	KilledAt   float64  `json:"killed_at_seconds"`
	Hosts      int      `json:"hosts_moved"`
	InFlight   int      `json:"urls_in_flight"`
	MovedP50   float64  `json:"moved_p50_seconds"`
	MovedMax   float64  `json:"moved_max_seconds"`
	Duplicates int      `json:"duplicate_fetches"`
	// DuplicatesInFlight are those of URLs the killed process held.
	DuplicatesInFlight int     `json:"duplicates_in_flight"`
	Missing            int     `json:"pages_missed"`
	Pages              int64   `json:"pages"`
	Seconds            float64 `json:"seconds"`
	Efficiency         float64 `json:"efficiency"`
	Heartbeat          string  `json:"node_ttl"`
}

// drainResult is a drain of many node identities at once, by one signal.
type drainResult struct {
	Pool         poolPlan `json:"pool"`
	Campaign     string   `json:"campaign"`
	Drained      int      `json:"identities_drained"`
	DrainedAt    float64  `json:"drained_at_seconds"`
	AllDrained   float64  `json:"all_drained_seconds"`
	BatchesAfter int64    `json:"batches_sent_after_drained"`
	Duplicates   int      `json:"duplicate_fetches"`
	Missing      int      `json:"pages_missed"`
	Pages        int64    `json:"pages"`
	Seconds      float64  `json:"seconds"`
	Efficiency   float64  `json:"efficiency"`
}

func runNodes(args []string) error {
	fs := flag.NewFlagSet("nodes", flag.ExitOnError)
	only := fs.String("only", "", "pools to run by name, comma-separated (default all)")
	skipRuns := fs.Bool("no-runs", false, "run only the failure scenarios")
	onlyCampaign := fs.Int("campaign", 0, "run only this campaign: 1 (400 hosts) or 2 (2,000 hosts); 0 both")
	failures := fs.Bool("failures", true, "with the largest pool: kill one of its processes mid-crawl, then drain a tenth of its nodes at once")
	scale := fs.Float64("scale", 1, "multiply hosts and pages per host by this (0.1 for a quick check)")
	bin := fs.String("spiderpool", "../bin/spiderpool", "the spiderpool binary")
	out := fs.String("out", "results.json", "results file")
	doc := fs.String("doc", "../docs/pool.md", "document whose measured section to rewrite (\"\" for none)")
	fs.Parse(args)
	plans := poolPlans
	if *only != "" {
		plans = nil
		for _, name := range strings.Split(*only, ",") {
			i := slices.IndexFunc(poolPlans, func(p poolPlan) bool { return p.Name == strings.TrimSpace(name) })
			if i < 0 {
				return fmt.Errorf("-only: no pool %q", name)
			}
			plans = append(plans, poolPlans[i])
		}
	}
	refused := &refusals{}
	st, err := startStackWith(*bin, nodePlan{}, stackOptions{
		pgSettings: []string{"max_connections=100"}, pgbouncer: true, pgOutput: refused,
	})
	if err != nil {
		return err
	}
	defer st.stop()
	nr := &nodesRun{Date: time.Now().UTC().Format(time.RFC3339), Scale: *scale}
	campaigns := poolCampaigns(*scale)
	if *onlyCampaign > 0 {
		if *onlyCampaign > len(campaigns) {
			return fmt.Errorf("-campaign: no campaign %d", *onlyCampaign)
		}
		campaigns = campaigns[*onlyCampaign-1 : *onlyCampaign]
	}
	if !*skipRuns {
		for _, p := range plans {
			for _, c := range campaigns {
				res, err := st.poolRun(p, c, refused)
				if err != nil {
					return fmt.Errorf("%s, %s: %w", p.Name, c.plan.name, err)
				}
				nr.Results = append(nr.Results, res)
			}
		}
	}
	if *failures {
		big := plans[len(plans)-1]
		if nr.Kill, err = st.killOne(big, campaigns[0]); err != nil {
			return fmt.Errorf("kill: %w", err)
		}
		if nr.Drain, err = st.drainMany(big, campaigns[0]); err != nil {
			return fmt.Errorf("drain: %w", err)
		}
	}
	fmt.Println()
	printNodes(os.Stdout, nr)
	r := loadResults(*out)
	r.Nodes = nr
	if err := saveResults(*out, r); err != nil {
		return err
	}
	if *doc == "" {
		return nil
	}
	return replaceSection(*doc, nodesBegin, nodesEnd, nodesSection(r.Machine, nr))
}

const (
	nodesBegin = "<!-- bench-nodes:begin (generated by `make bench-nodes` from bench/results.json; do not edit) -->"
	nodesEnd   = "<!-- bench-nodes:end -->"
)

// nodesSection is the measured section of docs/scale.md.
func nodesSection(machine string, nr *nodesRun) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\nMeasured %s on %s, one run of `make bench-nodes`", nodesBegin, nr.Date, machine)
	if nr.Scale != 1 {
		fmt.Fprintf(&b, " (scaled: hosts and pages per host x%g)", nr.Scale)
	}
	b.WriteString(". Postgres with `max_connections = 100` behind PgBouncer (transaction pooling, as spiderpool ships it), the Temporal dev server, node processes with the node defaults. Efficiency is pages ÷ (seconds × bound), seconds from the workflow's start to its result; events and activities are over every run of the campaign; latencies are from the nodes' SDK metrics; CPU-seconds are while the campaign ran; duplicates and misses are from the synthetic web's log.\n\n")
	b.WriteString("| pool | nodes | campaign | pages | seconds | of bound | events / 1,000 pages | activities / 1,000 | local activities / 1,000 | runs | workflow task p50 / p99 ms | lease p50 / p99 ms | Postgres connections (max) | refused | Postgres transactions / rows written per 1,000 pages | CPU-s nodes / Temporal / Postgres / PgBouncer | RSS / node MiB | duplicates | missed |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range nr.Results {
		fmt.Fprintf(&b, "| %s | %d | %s | %d | %.1f | **%.2f** | %.0f | %.2f | %.1f | %d | %.0f / %.0f | %.0f / %.0f | %d | %d | %.0f / %.0f | %.0f / %.0f / %.0f / %.0f | %.1f | %d | %d |\n",
			r.Pool.Name, r.Identities, r.Campaign, r.Pages, r.Seconds, r.Efficiency, r.EventsPer1000, r.ActivitiesPer1000,
			r.LocalPer1000, r.Runs, r.WorkflowTask.P50, r.WorkflowTask.P99, r.Lease.P50, r.Lease.P99, r.PGConnections, r.PGRefused,
			r.PGXactsPer1000, r.PGRowsPer1000,
			r.CPU["nodes"], r.CPU["temporal"], r.CPU["postgres"], r.CPU["pgbouncer"], r.RSSPerNode, r.Duplicates, r.Missing)
	}
	if k := nr.Kill; k != nil {
		fmt.Fprintf(&b, "\n**kill -9 of one process** of %s (%d node identities) %.0f s into the %s campaign: its %d hosts moved to other nodes within **%.1f s** (median %.1f s; node TTL %s); %d URLs were in flight, **%d pages fetched twice** (%d of them in flight at the kill), **%d missed**; the campaign reached %.2f of its bound.\n",
			k.Pool.Name, k.Killed, k.KilledAt, k.Campaign, k.Hosts, k.MovedMax, k.MovedP50, k.Heartbeat, k.InFlight,
			k.Duplicates, k.DuplicatesInFlight, k.Missing, k.Efficiency)
	}
	if d := nr.Drain; d != nil {
		fmt.Fprintf(&b, "\n**Drain of %d nodes by one signal** (`{\"nodes\": [...]}`) of %s %.0f s into the %s campaign: all %d drained **%.1f s** later, %d batches sent to them after; %d pages fetched twice, **%d missed**; the campaign reached %.2f of its bound.\n",
			d.Drained, d.Pool.Name, d.DrainedAt, d.Campaign, d.Drained, d.AllDrained, d.BatchesAfter, d.Duplicates, d.Missing, d.Efficiency)
	}
	b.WriteString("\n" + nodesEnd)
	return b.String()
}

// refusals counts the connections Postgres's log says it refused.
type refusals struct {
	mu   sync.Mutex
	n    atomic.Int64
	tail []byte
}

func (r *refusals) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	text := append(r.tail, p...)
	r.n.Add(int64(bytes.Count(text, []byte("too many clients"))))
	// Keep a line's start for the next write, counted once.
	if i := bytes.LastIndexByte(text, '\n'); i >= 0 {
		r.tail = append(r.tail[:0], text[i+1:]...)
	} else {
		r.tail = append(r.tail[:0], text...)
	}
	if bytes.Contains(r.tail, []byte("too many clients")) {
		r.n.Add(-1) // counted now, and again when the line completes
	}
	return len(p), nil
}

// connSampler samples the Postgres server's client connections until stop.
func (s *stack) connSampler() (stop func() int) {
	ctx, cancel := context.WithCancel(context.Background())
	var peak atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		conn, err := pgx.Connect(ctx, s.pg.URL("postgres"))
		if err != nil {
			return
		}
		defer conn.Close(context.Background())
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			var n int64
			if conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'`).Scan(&n) == nil {
				peak.Store(max(peak.Load(), n))
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() int { cancel(); <-done; return int(peak.Load()) }
}

// poolRun crawls one campaign on fresh nodes of plan p.
func (s *stack) poolRun(p poolPlan, pc poolCampaign, refused *refusals) (poolResult, error) {
	ctx := context.Background()
	res := poolResult{Pool: p, Identities: p.identities(), Campaign: pc.plan.name, Hosts: pc.web.hosts,
		MinDelay: pc.plan.minDelay.String(), Bound: pc.plan.bound(pc.web)}
	web, err := pc.web.start()
	if err != nil {
		return res, err
	}
	defer web.Close()
	res.WebPages = len(web.Pages())
	s.nodes = p.nodes()
	nodes, err := s.startNodes()
	if err != nil {
		return res, err
	}
	defer nodes.stop()
	fmt.Printf("%s (%d processes, %d nodes): %s, %d hosts x %d pages, min_delay %v: bound %.0f pages/s\n",
		p.Name, p.Procs, p.identities(), pc.plan.name, pc.web.hosts, pc.web.pagesPerHost, pc.plan.minDelay, res.Bound)
	refusedBefore := refused.n.Load()
	resetStatementStats(s)
	stopSampling := s.connSampler()
	stopBouncer := s.bouncerSampler()
	dbBefore := nodes.dbWork(ctx)
	c, err := nodes.crawlPolite(ctx, pc, web, nil)
	res.PGConnections = stopSampling()
	stopBouncer()
	dbAfter := nodes.dbWork(ctx)
	res.PGRefused = int(refused.n.Load() - refusedBefore)
	if err != nil {
		return res, err
	}
	res.Pages, res.Seconds = c.sum.Fetched, c.seconds
	res.Efficiency = float64(res.Pages) / (res.Seconds * res.Bound)
	res.Missing, res.Duplicates = web.TallyAgent(c.agent)
	res.CPU = cpuKinds(c.cpuBefore, c.cpuAfter)
	res.Batches = c.status.Counters.Batches
	res.LeasedAgain = max(0, c.status.Counters.Leased-(c.sum.Fetched+c.sum.Failed+c.sum.Excluded))
	hctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	cost, err := control.CampaignHistoryCost(hctx, nodes.client, c.id, c.sum.Runs)
	cancel()
	if err != nil {
		return res, err
	}
	res.Runs, res.Events, res.Activities, res.LocalActivities = cost.Runs, cost.Events, cost.Activities, cost.LocalActivities
	res.EventsPer1000 = per1000(cost.Events, res.Pages)
	res.ActivitiesPer1000 = per1000(cost.Activities, res.Pages)
	res.LocalPer1000 = per1000(cost.LocalActivities, res.Pages)
	res.TaskTimeouts, res.TaskFailures = cost.TaskTimeouts, cost.TaskFailures
	res.StallSeconds, res.StallAt = cost.Stall.Seconds(), cost.StallAt.Seconds()
	res.PGXactsPer1000 = per1000(int(dbAfter.xacts-dbBefore.xacts), res.Pages)
	res.PGRowsPer1000 = per1000(int(dbAfter.rows-dbBefore.rows), res.Pages)
	res.WorkflowTask, res.Lease = nodes.sdkLatencies(ctx)
	rss := nodes.peakRSS()
	res.RSSPerNode = float64(rss) / float64(p.identities()) / (1 << 20)
	res.RSSPerProcess = float64(rss) / float64(p.Procs) / (1 << 20)
	fmt.Printf("  %d pages in %.1fs: %.1f%% of the bound; %.0f events, %.1f activities per 1,000 pages; %d duplicates, %d missed; Postgres connections at most %d, %d refused\n",
		res.Pages, res.Seconds, 100*res.Efficiency, res.EventsPer1000, res.ActivitiesPer1000, res.Duplicates, res.Missing,
		res.PGConnections, res.PGRefused)
	fmt.Printf("  workflow tasks timed out %d, failed %d %v; longest quiet in the campaign's history %.1fs, from %.1fs\n",
		res.TaskTimeouts, res.TaskFailures, cost.TaskTrouble, res.StallSeconds, res.StallAt)
	printStatementStats(s)
	if os.Getenv("BENCH_TIMELINE") != "" {
		printTimeline(web, c.agent, c.start, res.Bound, pc.plan.minDelay)
		dumpHistory(ctx, nodes.client, c.id, c.start, filepath.Join(os.TempDir(), "bench-history-"+strings.ReplaceAll(p.Name, " ", "-")+".txt"))
		nodes.query(ctx, func(conn *pgx.Conn) error {
			var lease0, lease1, fetched50, fetched90, depth1first float64
			err := conn.QueryRow(ctx, `
				SELECT extract(epoch FROM min(f.first_leased_at) - $1), extract(epoch FROM max(f.first_leased_at) - $1),
				       extract(epoch FROM percentile_cont(0.5) WITHIN GROUP (ORDER BY p.fetched_at - f.first_leased_at)),
				       extract(epoch FROM percentile_cont(0.9) WITHIN GROUP (ORDER BY p.fetched_at - f.first_leased_at)),
				       (SELECT extract(epoch FROM percentile_cont(0.5) WITHIN GROUP (ORDER BY g.first_leased_at - $1)) FROM frontier g WHERE g.depth = 1)
				FROM frontier f JOIN pages p ON p.url_id = f.id WHERE f.depth = 0`, c.start).
				Scan(&lease0, &lease1, &fetched50, &fetched90, &depth1first)
			fmt.Printf("  roots leased %.2f..%.2fs after the start, fetched %.2fs (median) %.2fs (p90) after their lease; depth-1 URLs leased at %.2fs (median)\n",
				lease0, lease1, fetched50, fetched90, depth1first)
			return err
		})
	}
	return res, nil
}

func per1000(n int, pages int64) float64 {
	if pages == 0 {
		return 0
	}
	return float64(n) * 1000 / float64(pages)
}

// politeCrawl is one campaign of a pool run, as it ran.
type politeCrawl struct {
	id, agent  string
	start      time.Time
	seconds    float64
	sum        campaign.Summary
	status     campaign.Status
	cpuBefore  cpuSample
	cpuAfter   cpuSample
	killedPIDs []int
}

// crawlPolite runs the campaign over web and waits for its result; during
// calls mid (if set) once a third of the web's pages are fetched.
func (r *nodeSet) crawlPolite(ctx context.Context, pc poolCampaign, web *synthweb.Web, mid func(c *politeCrawl) error) (*politeCrawl, error) {
	c := &politeCrawl{id: fmt.Sprintf("pool%d", r.n), agent: fmt.Sprintf("spiderpool-pool-%d/1.0", r.n)}
	spec := pc.plan.spec(web.Roots(), c.agent)
	c.cpuBefore = sampleCPU()
	c.start = time.Now()
	wr, err := r.campaigns.Start(ctx, c.id, spec)
	if err != nil {
		return nil, err
	}
	if mid != nil {
		third := int64(len(web.Pages()) / 3)
		for deadline := time.Now().Add(10 * time.Minute); r.pages(ctx) < third; {
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("a third of the pages not fetched after 10 minutes")
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err := mid(c); err != nil {
			return nil, err
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	if err := wr.Get(wctx, &c.sum); err != nil {
		return nil, fmt.Errorf("campaign %s: %w", c.id, err)
	}
	c.seconds = time.Since(c.start).Seconds()
	c.cpuAfter = sampleCPU()
	qctx, qcancel := context.WithTimeout(ctx, time.Minute)
	defer qcancel()
	if c.status, err = r.campaigns.Status(qctx, c.id); err != nil {
		return nil, err
	}
	return c, nil
}

// dbCounters are the campaign database's committed transactions and rows
// written so far, as pg_stat_database has them.
type dbCounters struct{ xacts, rows int64 }

// dbWork reads the database's counters. Backends report theirs at the end
// of a transaction, at most a second apart, so a crawl of minutes is
// counted within a second's work.
func (r *nodeSet) dbWork(ctx context.Context) dbCounters {
	var c dbCounters
	r.query(ctx, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT xact_commit, tup_inserted + tup_updated + tup_deleted
			FROM pg_stat_database WHERE datname = current_database()`).Scan(&c.xacts, &c.rows)
	})
	return c
}

// pages counts the pages fetched so far.
func (r *nodeSet) pages(ctx context.Context) int64 {
	var n int64
	r.query(ctx, func(conn *pgx.Conn) error { return conn.QueryRow(ctx, `SELECT count(*) FROM pages`).Scan(&n) })
	return n
}

// query runs fn on a connection of the run's database (straight to
// Postgres, not through PgBouncer: the bench's own reads stay out of the
// nodes' pool).
func (r *nodeSet) query(ctx context.Context, fn func(*pgx.Conn) error) error {
	conn, err := pgx.Connect(ctx, r.db)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return fn(conn)
}

// cpuKinds is the CPU seconds between two samples by kind of process:
// nodes, Temporal, Postgres, PgBouncer, and the bench itself (the web).
func cpuKinds(a, b cpuSample) map[string]float64 {
	kinds := map[string]float64{}
	for name, v := range b.byChild {
		kind := name
		switch {
		case strings.HasPrefix(name, "spiderpool"):
			kind = "nodes"
		case strings.HasPrefix(name, "postgres"):
			kind = "postgres"
		case strings.HasPrefix(name, "temporal"):
			kind = "temporal"
		case strings.HasPrefix(name, "pgbouncer"):
			kind = "pgbouncer"
		}
		kinds[kind] += v - a.byChild[name]
	}
	for k, v := range kinds {
		if v < 0.05 {
			delete(kinds, k)
		}
	}
	return kinds
}

// sdkLatencies reads the nodes' SDK metrics: campaign workflow tasks'
// execution latency and LeaseHosts local activities' latency.
func (r *nodeSet) sdkLatencies(ctx context.Context) (workflowTask, lease latency) {
	var addrs []string
	r.query(ctx, func(conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, `SELECT DISTINCT metrics_addr FROM nodes WHERE metrics_addr IS NOT NULL`)
		if err != nil {
			return err
		}
		addrs, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	wft, la := &histogram{}, &histogram{}
	for _, addr := range addrs {
		families, err := scrape("http://" + addr + "/metrics")
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: metrics of", addr+":", err)
			continue
		}
		for name, f := range families {
			switch {
			case strings.HasPrefix(name, "temporal_workflow_task_execution_latency"):
				wft.add(f, map[string]string{"workflow_type": campaign.WorkflowType})
			case strings.HasPrefix(name, "temporal_local_activity_execution_latency"):
				la.add(f, map[string]string{"activity_type": campaign.LeaseHostsActivity})
			}
		}
	}
	return wft.latency(), la.latency()
}

func scrape(url string) (map[string]*dto.MetricFamily, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// histogram sums Prometheus histograms' buckets: upper bound -> count.
type histogram struct {
	buckets map[float64]uint64
	count   uint64
	unit    float64 // to milliseconds
}

// add takes the series of f whose labels include want.
func (h *histogram) add(f *dto.MetricFamily, want map[string]string) {
	if h.buckets == nil {
		h.buckets = map[float64]uint64{}
		h.unit = 1
		if strings.HasSuffix(f.GetName(), "_seconds") {
			h.unit = 1000
		}
	}
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range want {
			match = match && labels[k] == v
		}
		if !match || m.GetHistogram() == nil {
			continue
		}
		h.count += m.GetHistogram().GetSampleCount()
		for _, b := range m.GetHistogram().GetBucket() {
			h.buckets[b.GetUpperBound()] += b.GetCumulativeCount()
		}
	}
}

// latency is the histogram's p50 and p99, interpolated within buckets.
func (h *histogram) latency() latency {
	l := latency{N: h.count}
	if h.count == 0 {
		return l
	}
	var bounds []float64
	for b := range h.buckets {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	q := func(p float64) float64 {
		rank := p * float64(h.count)
		lower, below := 0.0, uint64(0)
		for _, b := range bounds {
			c := h.buckets[b]
			if float64(c) >= rank {
				if math.IsInf(b, 1) {
					return lower * h.unit
				}
				frac := 0.0
				if c > below {
					frac = (rank - float64(below)) / float64(c-below)
				}
				return (lower + frac*(b-lower)) * h.unit
			}
			lower, below = b, c
		}
		return lower * h.unit
	}
	l.P50, l.P99 = q(0.5), q(0.99)
	return l
}

// killOne kills -9 one process of pool p a third into the campaign, and
// measures how soon its hosts move, and what was fetched twice or lost.
func (s *stack) killOne(p poolPlan, pc poolCampaign) (*killResult, error) {
	ctx := context.Background()
	res := &killResult{Pool: p, Campaign: pc.plan.name, Killed: max(p.Replicas, 1), Heartbeat: "15s (node default)"}
	web, err := pc.web.start()
	if err != nil {
		return nil, err
	}
	defer web.Close()
	s.nodes = p.nodes()
	nodes, err := s.startNodes()
	if err != nil {
		return nil, err
	}
	defer nodes.stop()
	fmt.Printf("kill: %s, one process of %d nodes killed a third into %s\n", p.Name, res.Killed, pc.plan.name)
	k := &processKill{nodes: nodes, prefix: fmt.Sprintf("bench%d-n1", nodes.n), inFlight: map[string]bool{}}
	c, err := nodes.crawlPolite(ctx, pc, web, func(c *politeCrawl) error {
		if err := k.kill(ctx); err != nil {
			return err
		}
		res.KilledAt = k.at.Sub(c.start).Seconds()
		return nil
	})
	if err != nil {
		return nil, err
	}
	res.Pages, res.Seconds = c.sum.Fetched, c.seconds
	res.Efficiency = float64(res.Pages) / (res.Seconds * pc.plan.bound(pc.web))
	res.Hosts, res.InFlight = len(k.hosts), len(k.inFlight)
	moved, err := k.moved(ctx)
	if err != nil {
		return nil, err
	}
	if len(moved) > 0 {
		res.MovedP50, res.MovedMax = moved[len(moved)/2], moved[len(moved)-1]
	}
	k.tally(res, web, c.agent)
	fmt.Printf("  %d hosts moved: median %.1fs, last %.1fs after the kill; %d URLs in flight, %d duplicates (%d of them in flight), %d missed\n",
		res.Hosts, res.MovedP50, res.MovedMax, res.InFlight, res.Duplicates, res.DuplicatesInFlight, res.Missing)
	return res, nil
}

// processKill is kill -9 of the first node process of a pool mid-crawl:
// the hosts its identities owned, the URLs they held, and when it died.
type processKill struct {
	nodes    *nodeSet
	prefix   string // the process's identities: prefix, or prefix-<n> with replicas
	hosts    []string
	inFlight map[string]bool
	at       time.Time
}

// kill notes the hosts the process owns and the URLs it holds, kills it,
// and notes again what it held as it died.
func (k *processKill) kill(ctx context.Context) error {
	err := k.nodes.query(ctx, func(conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, `SELECT DISTINCT shard_key FROM frontier WHERE node = $1 OR node LIKE $2`, k.prefix, k.prefix+"-%")
		if err != nil {
			return err
		}
		k.hosts, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		return err
	}
	k.sampleInFlight(ctx)
	k.at = time.Now()
	if err := k.nodes.procs[0].Signal(syscall.SIGKILL); err != nil {
		return err
	}
	k.sampleInFlight(ctx) // what it held as it died
	return nil
}

// sampleInFlight adds the URLs the process holds leased to inFlight.
func (k *processKill) sampleInFlight(ctx context.Context) {
	k.nodes.query(ctx, func(conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, `SELECT url FROM frontier WHERE state = 'leased' AND (node = $1 OR node LIKE $2)`, k.prefix, k.prefix+"-%")
		if err != nil {
			return err
		}
		urls, err := pgx.CollectRows(rows, pgx.RowTo[string])
		for _, u := range urls {
			k.inFlight[u] = true
		}
		return err
	})
}

// moved is, for each host the process owned, the seconds from the kill
// to the first page another node fetched of it, in order.
func (k *processKill) moved(ctx context.Context) ([]float64, error) {
	var moved []float64
	err := k.nodes.query(ctx, func(conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, `
			SELECT extract(epoch FROM min(p.fetched_at) - $3::timestamptz)
			FROM pages p JOIN frontier f ON f.id = p.url_id
			WHERE f.shard_key = ANY($1) AND p.node NOT LIKE $2 AND p.fetched_at > $3
			GROUP BY f.shard_key`, k.hosts, k.prefix+"%", k.at)
		if err != nil {
			return err
		}
		moved, err = pgx.CollectRows(rows, pgx.RowTo[float64])
		return err
	})
	sort.Float64s(moved)
	return moved, err
}

// tally counts the web's pages the campaign missed and fetched twice, and
// of those twice the ones the process held as it died.
func (k *processKill) tally(res *killResult, web *synthweb.Web, agent string) {
	hits := web.HitsBy(agent)
	for _, pg := range web.Pages() {
		switch n := hits[pg]; {
		case n == 0:
			res.Missing++
		case n > web.ExpectedHits(pg):
			res.Duplicates++
			if k.inFlight[pg] {
				res.DuplicatesInFlight++
			}
		}
	}
}

// drainMany drains one process's node identities with one signal a third
// into the campaign, and measures how soon they are all drained.
func (s *stack) drainMany(p poolPlan, pc poolCampaign) (*drainResult, error) {
	ctx := context.Background()
	res := &drainResult{Pool: p, Campaign: pc.plan.name}
	web, err := pc.web.start()
	if err != nil {
		return nil, err
	}
	defer web.Close()
	s.nodes = p.nodes()
	nodes, err := s.startNodes()
	if err != nil {
		return nil, err
	}
	defer nodes.stop()
	prefix := fmt.Sprintf("bench%d-n2-", nodes.n) // the second process's identities
	var drained []string
	sent := map[string]int64{}
	c, err := nodes.crawlPolite(ctx, pc, web, func(c *politeCrawl) error {
		st, err := nodes.campaigns.Status(ctx, c.id)
		if err != nil {
			return err
		}
		for _, n := range st.Nodes {
			if strings.HasPrefix(n.ID, prefix) {
				drained = append(drained, n.ID)
			}
		}
		res.Drained = len(drained)
		fmt.Printf("drain: %s, %d nodes drained by one signal a third into %s\n", p.Name, res.Drained, pc.plan.name)
		at := time.Now()
		res.DrainedAt = at.Sub(c.start).Seconds()
		if err := nodes.client.SignalWorkflow(ctx, c.id, "", campaign.Drain, campaign.NodeRequest{Nodes: drained}); err != nil {
			return err
		}
		for deadline := at.Add(5 * time.Minute); ; {
			st, err := nodes.campaigns.Status(ctx, c.id)
			all := err == nil
			for _, n := range st.Nodes {
				if slices.Contains(drained, n.ID) {
					all = all && n.State == campaign.NodeDrained
					sent[n.ID] = n.BatchesSent
				}
			}
			if all {
				res.AllDrained = time.Since(at).Seconds()
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the %d nodes not all drained after 5 minutes", len(drained))
			}
			time.Sleep(250 * time.Millisecond)
		}
	})
	if err != nil {
		return nil, err
	}
	for _, n := range c.status.Nodes {
		if was, ok := sent[n.ID]; ok {
			res.BatchesAfter += n.BatchesSent - was
		}
	}
	res.Pages, res.Seconds = c.sum.Fetched, c.seconds
	res.Efficiency = float64(res.Pages) / (res.Seconds * pc.plan.bound(pc.web))
	res.Missing, res.Duplicates = web.TallyAgent(c.agent)
	fmt.Printf("  all %d drained %.1fs after the signal; %d batches sent to them after; %d duplicates, %d missed\n",
		res.Drained, res.AllDrained, res.BatchesAfter, res.Duplicates, res.Missing)
	return res, nil
}

// printNodes writes the summary table.
func printNodes(w io.Writer, nr *nodesRun) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "pool\tnodes\tcampaign\tpages\tseconds\tof bound\tevents/1k\tactivities/1k\tlocal/1k\truns\twf task p50/p99 ms\tlease p50/p99 ms\tPG conns\trefused\tPG xacts/rows per 1k\tCPU-s nodes/temporal/postgres/pgbouncer\tRSS/node MiB\tdups\tmissed\t\n")
	for _, r := range nr.Results {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%.1f\t%.2f\t%.0f\t%.1f\t%.0f\t%d\t%.0f/%.0f\t%.0f/%.0f\t%d\t%d\t%.0f/%.0f\t%.0f/%.0f/%.0f/%.0f\t%.1f\t%d\t%d\t\n",
			r.Pool.Name, r.Identities, r.Campaign, r.Pages, r.Seconds, r.Efficiency, r.EventsPer1000, r.ActivitiesPer1000,
			r.LocalPer1000, r.Runs, r.WorkflowTask.P50, r.WorkflowTask.P99, r.Lease.P50, r.Lease.P99, r.PGConnections,
			r.PGRefused, r.PGXactsPer1000, r.PGRowsPer1000, r.CPU["nodes"], r.CPU["temporal"], r.CPU["postgres"], r.CPU["pgbouncer"], r.RSSPerNode,
			r.Duplicates, r.Missing)
	}
	tw.Flush()
	if k := nr.Kill; k != nil {
		fmt.Fprintf(w, "kill -9 of one process of %s (%d nodes) at %.0fs: its %d hosts moved within %.1fs (median %.1fs); %d URLs in flight, %d duplicates (%d of them in flight), %d missed; %.2f of the bound\n",
			k.Pool.Name, k.Killed, k.KilledAt, k.Hosts, k.MovedMax, k.MovedP50, k.InFlight, k.Duplicates, k.DuplicatesInFlight, k.Missing, k.Efficiency)
	}
	if d := nr.Drain; d != nil {
		fmt.Fprintf(w, "drain of %d nodes of %s by one signal at %.0fs: all drained %.1fs later, %d batches sent to them after, %d duplicates, %d missed; %.2f of the bound\n",
			d.Drained, d.Pool.Name, d.DrainedAt, d.AllDrained, d.BatchesAfter, d.Duplicates, d.Missing, d.Efficiency)
	}
}

// printTimeline prints, under BENCH_TIMELINE=1, the requests the web
// served each 5 seconds of the campaign, against the bound: where a run
// lost its time (the start, the end, a stall).
func printTimeline(web *synthweb.Web, agent string, start time.Time, bound float64, delay time.Duration) {
	buckets, first10 := map[int]int{}, make([]int, 10)
	last := 0
	var first time.Duration = math.MaxInt64
	for _, h := range web.Hosts() {
		for _, r := range web.Log(h) {
			if r.Agent == agent {
				d := r.At.Sub(start)
				first = min(first, d)
				b := int(d / (5 * time.Second))
				buckets[b]++
				last = max(last, b)
				if s := int(d / time.Second); s < 10 {
					first10[s]++
				}
			}
		}
	}
	fmt.Printf("  first request %.2fs after the start; requests each of the first 10 s: %v\n", first.Seconds(), first10)
	printGaps(web, agent, start, delay)
	var parts []string
	for b := 0; b <= last; b++ {
		parts = append(parts, fmt.Sprintf("%d", int(100*float64(buckets[b])/(5*bound))))
	}
	fmt.Printf("  %% of the bound each 5 s: %s\n", strings.Join(parts, " "))
}

// printGaps says where the slowest hosts lost their time: the wait for a
// host's first request, and its gaps beyond the politeness delay, small
// (a late timer, up to 100 ms), medium (to 1 s) and long (the host ran
// out of work).
func printGaps(web *synthweb.Web, agent string, start time.Time, delay time.Duration) {
	type loss struct {
		host                string
		first, end          time.Duration
		small, medium, long time.Duration
		longAt              []string
	}
	var all []loss
	for _, h := range web.Hosts() {
		var at []time.Time
		for _, r := range web.Log(h) {
			if r.Agent == agent {
				at = append(at, r.At)
			}
		}
		if len(at) == 0 {
			continue
		}
		slices.SortFunc(at, func(a, b time.Time) int { return a.Compare(b) })
		l := loss{host: h, first: at[0].Sub(start), end: at[len(at)-1].Sub(start)}
		for i := 1; i < len(at); i++ {
			over := at[i].Sub(at[i-1]) - delay
			switch {
			case over <= 0:
			case over <= 100*time.Millisecond:
				l.small += over
			case over <= time.Second:
				l.medium += over
			default:
				l.long += over
				l.longAt = append(l.longAt, fmt.Sprintf("%.1fs@%.0f", over.Seconds(), at[i-1].Sub(start).Seconds()))
			}
		}
		all = append(all, l)
	}
	slices.SortFunc(all, func(a, b loss) int { return cmp.Compare(b.end, a.end) })
	var sum loss
	for _, l := range all {
		sum.first += l.first
		sum.small += l.small
		sum.medium += l.medium
		sum.long += l.long
	}
	n := time.Duration(max(len(all), 1))
	fmt.Printf("  per host, mean: first request %.2fs, late by <=100ms %.2fs, by <=1s %.2fs, longer %.2fs\n",
		(sum.first / n).Seconds(), (sum.small / n).Seconds(), (sum.medium / n).Seconds(), (sum.long / n).Seconds())
	for _, l := range all[:min(8, len(all))] {
		fmt.Printf("  last %s: ends %.1fs, first %.2fs, late <=100ms %.2fs, <=1s %.2fs, longer %.2fs %v\n",
			l.host, l.end.Seconds(), l.first.Seconds(), l.small.Seconds(), l.medium.Seconds(), l.long.Seconds(), l.longAt)
	}
}

// dumpHistory writes, under BENCH_TIMELINE, the campaign's last run's
// events one a line, with seconds from start and the worker that took
// each workflow task: what the workflow did while hosts waited (a long
// workflow task is a slow lease).
func dumpHistory(ctx context.Context, c client.Client, id string, start time.Time, path string) {
	f, err := os.Create(path)
	if err != nil {
		return
	}
	defer f.Close()
	it := c.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			return
		}
		detail := ""
		if m := e.GetMarkerRecordedEventAttributes(); m != nil {
			detail = fmt.Sprint(len(m.GetDetails()))
		}
		if a := e.GetWorkflowTaskStartedEventAttributes(); a != nil {
			detail = a.GetIdentity()
		}
		fmt.Fprintf(f, "%8.3f %s %s\n", e.GetEventTime().AsTime().Sub(start).Seconds(), e.GetEventType(), detail)
	}
	fmt.Println("  history in", path)
}

// bouncerSampler prints, under BENCH_TIMELINE, what PgBouncer's SHOW POOLS
// said of clients waiting for a server connection, each 250 ms, until
// stop: the most waiting at once and the longest wait.
func (s *stack) bouncerSampler() (stop func()) {
	if s.bouncer == nil || os.Getenv("BENCH_TIMELINE") == "" {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		cfg, err := pgx.ParseConfig(s.bouncer.URL("pgbouncer"))
		if err != nil {
			return
		}
		cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			fmt.Println("  pgbouncer stats:", err)
			return
		}
		defer conn.Close(context.Background())
		start := time.Now()
		var most, samples, waitingSamples int
		var longest time.Duration
		var over []string
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			rows, err := conn.Query(ctx, "SHOW POOLS")
			if err == nil {
				for rows.Next() {
					vals, _ := rows.Values()
					names := rows.FieldDescriptions()
					var db string
					var waiting, waitS, waitUs int64
					for i, f := range names {
						switch f.Name {
						case "database":
							db = fmt.Sprint(vals[i])
						case "cl_waiting":
							waiting = asInt(vals[i])
						case "maxwait":
							waitS = asInt(vals[i])
						case "maxwait_us":
							waitUs = asInt(vals[i])
						}
					}
					if db == "pgbouncer" {
						continue
					}
					w := time.Duration(waitS)*time.Second + time.Duration(waitUs)*time.Microsecond
					samples++
					if waiting > 0 {
						waitingSamples++
					}
					most = max(most, int(waiting))
					longest = max(longest, w)
					if w > 500*time.Millisecond {
						over = append(over, fmt.Sprintf("%.1fs@%.0f", w.Seconds(), time.Since(start).Seconds()))
					}
				}
				rows.Close()
			}
			select {
			case <-ctx.Done():
				fmt.Printf("  pgbouncer: clients waiting in %d of %d samples, at most %d at once; longest wait %.2fs; over 0.5s: %v\n",
					waitingSamples, samples, most, longest.Seconds(), over)
				return
			case <-tick.C:
			}
		}
	}()
	return func() { cancel(); <-done }
}

// asInt reads a SHOW POOLS column, whichever type the console sent it as.
func asInt(v any) int64 {
	i, _ := strconv.ParseInt(fmt.Sprint(v), 10, 64)
	return i
}
