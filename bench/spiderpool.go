package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"

	"github.com/jackc/pgx/v5"
	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/config"
	"github.com/spiderpool/spiderpool/control"
	"github.com/spiderpool/spiderpool/devstack"
	"github.com/spiderpool/spiderpool/processor"
	"github.com/spiderpool/spiderpool/store"
)

// stack is spiderpool's full stack for the benchmark: a Postgres cluster,
// the Temporal dev server persisting to a file, and node processes started
// per run on a fresh database.
type stack struct {
	dir      string
	pg       *devstack.Postgres
	temporal *devstack.Temporal
	// bouncer, when set, fronts pg: the nodes reach Postgres through it.
	bouncer *devstack.PgBouncer
	pgLog   *os.File // BENCH_PG_LOG's file, if set
	bin     string
	nodes   nodePlan
	runs    int
}

// nodePlan is the node processes each run starts: one per weight.
type nodePlan struct {
	weights []float64
	// concurrency is each node's --fetch-concurrency; 0 keeps the node's
	// default.
	concurrency int
	// replicas is each process's --replicas (node identities); 0 is 1.
	replicas int
	// flags are more worker flags for every node (--browser, say).
	flags []string
}

// identities is how many nodes the plan's processes register.
func (p nodePlan) identities() int { return len(p.weights) * max(p.replicas, 1) }

// stackOptions shape the stack beyond its nodes.
type stackOptions struct {
	// pgSettings are more Postgres settings (name=value).
	pgSettings []string
	// pgbouncer puts PgBouncer (transaction pooling) between the nodes and
	// Postgres, as a deployment of many nodes does.
	pgbouncer bool
	// pgOutput receives Postgres's log.
	pgOutput io.Writer
}

// equalNodes is n nodes of weight 1.
func equalNodes(n, concurrency int) nodePlan {
	p := nodePlan{concurrency: concurrency}
	for range n {
		p.weights = append(p.weights, 1)
	}
	return p
}

func startStack(bin string, nodes nodePlan) (*stack, error) {
	return startStackWith(bin, nodes, stackOptions{})
}

func startStackWith(bin string, nodes nodePlan, o stackOptions) (*stack, error) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "spiderpool-bench-")
	if err != nil {
		return nil, err
	}
	s := &stack{dir: dir, bin: bin, nodes: nodes}
	settings := append(o.pgSettings, statementStatsSettings()...)
	pgOut := o.pgOutput
	if path := os.Getenv("BENCH_PG_LOG"); path != "" { // Postgres's log too, for auto_explain and the like
		if s.pgLog, err = os.Create(path); err != nil {
			return nil, err
		}
		pgOut = s.pgLog
		if o.pgOutput != nil {
			pgOut = io.MultiWriter(o.pgOutput, s.pgLog)
		}
	}
	if s.pg, err = devstack.StartPostgres(ctx, devstack.PostgresOptions{Settings: settings, Output: pgOut}); err != nil {
		return nil, err
	}
	if o.pgbouncer {
		up, err := devstack.UpstreamOf(s.pg.URL("postgres"))
		up.Database = "" // every database: each run has its own
		if err == nil {
			pool, _ := strconv.Atoi(os.Getenv("BENCH_PGBOUNCER_POOL")) // 0: PgBouncer's default as spiderpool ships it
			s.bouncer, err = devstack.StartPgBouncer(ctx, devstack.PgBouncerOptions{Upstream: up, PoolSize: pool})
		}
		if err != nil {
			s.pg.Stop()
			return nil, fmt.Errorf("pgbouncer: %w", err)
		}
	}
	s.temporal, err = devstack.StartTemporal(ctx, devstack.TemporalOptions{UIPort: -1, DBFile: filepath.Join(dir, "temporal.db")})
	if err != nil {
		s.stopDatabase()
		return nil, err
	}
	return s, nil
}

func (s *stack) stopDatabase() {
	if s.bouncer != nil {
		s.bouncer.Stop()
	}
	s.pg.Stop()
	if s.pgLog != nil {
		s.pgLog.Close()
	}
}

func (s *stack) stop() {
	s.temporal.Stop()
	s.stopDatabase()
	os.RemoveAll(s.dir)
}

// nodeSet is one run's nodes: a fresh database and control queue, the node
// processes of the stack's plan, all registered, and a client for starting
// campaigns.
type nodeSet struct {
	n         int // the stack's run number: campaign IDs use it
	db        string
	procs     []*devstack.Node
	client    client.Client
	campaigns *control.Campaigns
	// secret is the node secret the nodes serve bodies behind and the
	// no-op processor presents.
	secret string
}

// startNodes starts the nodes of the stack's plan on a fresh database and
// waits until all have registered.
func (s *stack) startNodes() (_ *nodeSet, err error) {
	ctx := context.Background()
	s.runs++
	r := &nodeSet{n: s.runs, secret: config.NewSecret()}
	defer func() {
		if err != nil {
			r.stop()
		}
	}()
	if err := s.freshStart(ctx); err != nil {
		return nil, err
	}
	if r.db, err = s.pg.CreateDatabase(ctx, fmt.Sprintf("bench_%d", s.runs)); err != nil {
		return nil, err
	}
	cfg := config.Default()
	cfg.DatabaseURL, cfg.TemporalAddress = r.db, s.temporal.Address()
	cfg.ControlQueue = fmt.Sprintf("bench.%d", s.runs)
	env := devstack.Env{DatabaseURL: s.nodeDatabase(r.db), TemporalAddress: cfg.TemporalAddress,
		ControlQueue: cfg.ControlQueue, NodeSecret: r.secret}
	for i, w := range s.nodes.weights {
		n, err := devstack.StartNode(devstack.NodeOptions{
			Binary: s.bin, ID: fmt.Sprintf("bench%d-n%d", s.runs, i+1), Weight: w, Replicas: s.nodes.replicas,
			Flags: s.nodeFlags(i), Env: env, ProcessOptions: devstack.ProcessOptions{Output: os.Stderr},
		})
		if err != nil {
			return nil, err
		}
		r.procs = append(r.procs, n)
	}
	if err := waitRegistered(ctx, r.db, r.procs); err != nil {
		return nil, err
	}
	if r.client, err = control.Dial(ctx, cfg, slog.New(slog.DiscardHandler)); err != nil {
		return nil, err
	}
	r.campaigns = &control.Campaigns{Client: r.client, Queue: cfg.ControlQueue}
	if err := waitPolling(ctx, r.client, cfg.ControlQueue, len(r.procs)); err != nil {
		return nil, err
	}
	return r, nil
}

// waitPolling waits (up to a minute) until procs workers poll queue for
// workflow tasks: a node registers before its Temporal worker starts, and
// a campaign started then would pay for 48 processes' start-up as if it
// were the crawl's. A pool is up before its campaigns.
func waitPolling(ctx context.Context, c client.Client, queue string, procs int) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		d, err := c.DescribeTaskQueue(ctx, queue, enumspb.TASK_QUEUE_TYPE_WORKFLOW)
		if err == nil && len(d.GetPollers()) >= procs {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d processes polling %s: %d after a minute (%v)", procs, queue, len(d.GetPollers()), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// nodeDatabase is the URL the nodes reach the run's database db at:
// through PgBouncer when it runs.
func (s *stack) nodeDatabase(db string) string {
	if s.bouncer != nil {
		return s.bouncer.URL(fmt.Sprintf("bench_%d", s.runs))
	}
	return db
}

// nodeFlags are the worker flags of the plan's i-th node.
func (s *stack) nodeFlags(i int) []string {
	flags := []string{"--allow-private-networks", "--log-level", "warn", "--connect-timeout", "30s"}
	flags = append(flags, s.nodes.flags...)
	if s.nodes.concurrency > 0 {
		flags = append(flags, "--fetch-concurrency", strconv.Itoa(s.nodes.concurrency))
	}
	// Each node serves metrics and, behind the node secret, page bodies,
	// as deployed nodes do: processors get bodies by reference from it.
	flags = append(flags, "--metrics-addr", "127.0.0.1:0", "--bodies-addr", "127.0.0.1:0")
	if base := os.Getenv("BENCH_PPROF_BASE"); base != "" { // profile the nodes: 127.0.0.1:<base+i>
		port, _ := strconv.Atoi(base)
		flags = append(flags, "--pprof", fmt.Sprintf("127.0.0.1:%d", port+i))
	}
	return flags
}

// freshStart gives each run the same start: the last run's database is
// dropped (else autovacuum cleans it up while this run crawls), and a
// checkpoint is taken (else one falls, by WAL volume, in whichever run
// reaches it).
func (s *stack) freshStart(ctx context.Context) error {
	if s.runs < 2 {
		return nil
	}
	conn, err := pgx.Connect(ctx, s.pg.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	last := pgx.Identifier{fmt.Sprintf("bench_%d", s.runs-1)}.Sanitize()
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+last+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop the last run's database: %w", err)
	}
	_, err = conn.Exec(ctx, "CHECKPOINT")
	return err
}

// waitRegistered waits until the nodes are alive in the registry at db,
// read straight from Postgres: the bench's own reads stay out of the
// nodes' pool.
func waitRegistered(ctx context.Context, db string, nodes []*devstack.Node) error {
	st, err := store.Open(ctx, db, 2, 10*time.Second)
	if err != nil {
		return err
	}
	defer st.Close()
	return devstack.WaitRegistered(ctx, st, time.Minute, nodes...)
}

// peakRSS is the nodes' peak resident sets, summed, in bytes.
func (r *nodeSet) peakRSS() int64 {
	var rss int64
	for _, p := range r.procs {
		n, _ := p.PeakRSS()
		rss += n
	}
	return rss
}

// stop stops the nodes (SIGTERM, as an operator would) and waits for them.
func (r *nodeSet) stop() {
	if r.client != nil {
		r.client.Close()
	}
	devstack.StopNodes(r.procs...)
}

// spiderpoolResult is a crawl plus what only spiderpool reports.
type spiderpoolResult struct {
	crawlResult
	Runs             int   `json:"workflow_runs"`
	MaxHistoryEvents int64 `json:"max_history_events"`
}

// noopProcessor is the processor of the processor comparison: it returns
// nothing for every page, so what is measured is the cost of delivery
// (bodies kept, batches sent, bodies got, results stored), not of user
// code. Its batches go by reference: Temporal carries a token per batch,
// and the processor gets the pages, then their bodies, from a node in one
// request each, as a processor keeping up with a fast crawl should take
// them, in batches as large as a spec allows: each batch costs events in
// the campaign's history and a lease, a read and a store, whatever its
// size.
var noopProcessor = campaign.Processor{Name: "noop", Activity: "noop", BatchSize: 1000, Window: 8, Batch: campaign.BatchReference}

// runNoop runs the no-op processor in this process, on the nodes'
// Temporal client, until stop; p is it as a spec names it.
func (r *nodeSet) runNoop() (p campaign.Processor, stop func()) {
	p = noopProcessor
	p.TaskQueue = fmt.Sprintf("bench.noop.%d", r.n)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- processor.New(p.Name).Queue(p.TaskQueue).NodeSecret(r.secret).Logger(slog.New(slog.DiscardHandler)).
			Run(ctx, processor.WithClient(r.client), processor.WithConcurrency(16))
	}()
	return p, func() { cancel(); <-done }
}

// crawl runs one campaign over the web from seed on fresh nodes and
// database, timing it from the workflow's start to its result. With noop
// every HTML page also goes to a no-op processor run in this process.
func (s *stack) crawl(seed string, maxDepth int, noop bool) (spiderpoolResult, error) {
	ctx := context.Background()
	r, err := s.startNodes()
	if err != nil {
		return spiderpoolResult{}, err
	}
	defer r.stop()
	spec := campaign.Spec{
		Seeds:      []string{seed},
		Scope:      campaign.Scope{AllowedDomains: []string{"127.0.0.1"}},
		Limits:     campaign.Limits{MaxDepth: &maxDepth},
		Politeness: campaign.Politeness{MaxConcurrencyPerHost: 4},
	}
	if noop {
		p, stop := r.runNoop()
		defer stop()
		spec.Processors = []campaign.Processor{p}
	}
	id := fmt.Sprintf("bench-%d", r.n)
	cpu := sampleCPU()
	start := time.Now()
	wr, err := r.campaigns.Start(ctx, id, spec)
	if err != nil {
		return spiderpoolResult{}, err
	}
	var sum campaign.Summary
	if err := wr.Get(ctx, &sum); err != nil {
		return spiderpoolResult{}, err
	}
	elapsed := time.Since(start)
	fmt.Println("       ", cpuByChild(cpu, sampleCPU()))
	if noop {
		printTail(ctx, r.db, start, elapsed)
	}
	res := spiderpoolResult{
		crawlResult: crawlResult{Pages: sum.Fetched, Seconds: elapsed.Seconds(), PeakRSSMB: float64(r.peakRSS()) / (1 << 20)},
		Runs:        sum.Runs,
	}
	if os.Getenv("BENCH_EVENTS") != "" {
		printEventTypes(ctx, r.client, id)
		printLastEvents(ctx, r.client, id, start)
	}
	lengths, err := runHistories(ctx, r.client, id, sum.Runs)
	res.MaxHistoryEvents = slices.Max(append(lengths, 0))
	return res, err
}

// runHistories is the history length of each of the campaign's workflow
// runs, from visibility, once it lists them all closed (waiting up to a
// minute).
func runHistories(ctx context.Context, c client.Client, id string, runs int) ([]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	closed, err := control.ClosedRuns(ctx, c, id, runs)
	lengths := make([]int64, len(closed))
	for i, e := range closed {
		lengths[i] = e.GetHistoryLength()
	}
	if err != nil {
		return lengths, fmt.Errorf("campaign %s, %d runs: %w", id, runs, err)
	}
	return lengths, nil
}

// noopSettings names the no-op processor's settings, as results record them.
func noopSettings() string {
	return fmt.Sprintf("batch %d, window %d, batches by %s", noopProcessor.BatchSize, noopProcessor.Window, noopProcessor.Batch)
}

// printEventTypes prints, under BENCH_EVENTS=1, how many events of each
// type the campaign's last run and its children wrote: where Temporal's
// time goes.
func printEventTypes(ctx context.Context, c client.Client, id string) {
	counts := map[string]int{}
	var walk func(id, run, prefix string)
	walk = func(id, run, prefix string) {
		for _, e := range history(ctx, c, id, run) {
			counts[prefix+e.GetEventType().String()+markerKind(e)]++
			if a := e.GetChildWorkflowExecutionStartedEventAttributes(); a != nil {
				walk(a.GetWorkflowExecution().GetWorkflowId(), a.GetWorkflowExecution().GetRunId(), "child ")
			}
		}
	}
	walk(id, "", "")
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		fmt.Printf("        %6d %s\n", counts[k], k)
	}
}

// markerKind names a local activity's marker by its activity type, and a
// processor's lease by whether it took pages: " LeaseDeliveries (empty)".
func markerKind(e *historypb.HistoryEvent) string {
	a := e.GetMarkerRecordedEventAttributes()
	if a == nil || a.GetMarkerName() != "LocalActivity" {
		return ""
	}
	var data struct{ ActivityType string }
	if p := a.GetDetails()["data"].GetPayloads(); len(p) > 0 {
		json.Unmarshal(p[0].GetData(), &data)
	}
	kind := " " + data.ActivityType
	if data.ActivityType == campaign.LeaseDeliveriesActivity {
		var lease campaign.DeliveryLease
		if p := a.GetDetails()["result"].GetPayloads(); len(p) > 0 && json.Unmarshal(p[0].GetData(), &lease) == nil && len(lease.IDs) == 0 {
			kind += " (empty)"
		}
	}
	return kind
}

// printTail prints when the crawl fetched its last page, beside when the
// campaign completed: what lies between is processing still waiting when
// fetching ended.
func printTail(ctx context.Context, db string, start time.Time, elapsed time.Duration) {
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	var last time.Time
	if conn.QueryRow(ctx, `SELECT max(fetched_at) FROM pages`).Scan(&last) == nil {
		fmt.Printf("        last page fetched at %.1f s, campaign completed at %.1f s\n", last.Sub(start).Seconds(), elapsed.Seconds())
	}
}

// printLastEvents prints, under BENCH_EVENTS=1, the campaign's last run's
// events of its last 5 seconds, with their times from start: what the
// run waited on once fetching was over.
func printLastEvents(ctx context.Context, c client.Client, id string, start time.Time) {
	events := history(ctx, c, id, "")
	if len(events) == 0 {
		return
	}
	end := events[len(events)-1].GetEventTime().AsTime()
	for _, e := range events {
		at := e.GetEventTime().AsTime()
		if end.Sub(at) > 5*time.Second {
			continue
		}
		what := ""
		if a := e.GetMarkerRecordedEventAttributes(); a != nil {
			what = a.GetMarkerName()
		}
		if a := e.GetActivityTaskScheduledEventAttributes(); a != nil {
			what = a.GetActivityType().GetName()
		}
		if a := e.GetTimerStartedEventAttributes(); a != nil {
			what = a.GetStartToFireTimeout().AsDuration().String()
		}
		fmt.Printf("        %7.3f s %s %s\n", at.Sub(start).Seconds(), e.GetEventType(), what)
	}
}

// history is a workflow run's events (the latest run when run is ""), up
// to the first error reading them, which it reports.
func history(ctx context.Context, c client.Client, id, run string) []*historypb.HistoryEvent {
	var events []*historypb.HistoryEvent
	it := c.GetWorkflowHistory(ctx, id, run, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: history:", err)
			break
		}
		events = append(events, e)
	}
	return events
}
