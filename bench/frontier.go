package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/spiderpool/spiderpool/activities"
	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/crawl"
	"github.com/spiderpool/spiderpool/devstack"
	"github.com/spiderpool/spiderpool/store"
)

// bench frontier: what one lease and one idle poll cost when the frontier
// holds millions of rows. It loads a synthetic frontier into a throwaway
// cluster, then records the plan of every statement a lease and an idle
// poll run (auto_explain with ANALYZE and BUFFERS, so the statements are
// the store's own, not copies of them) and times LeaseHosts end to end.
//
// Two campaigns share the table, as they would a real cluster:
//   - busy: 80% of the rows and hosts, a crawl in full swing: most URLs
//     fetched, a third pending (5% of those in retry backoff, 2% handed
//     back), 1.5% leased (mostly claimed by live nodes, some by a dead
//     one, some unclaimed), and one host in 400 paused for a day;
//   - tail: the rest, nearly done: its largest host paused by a
//     Retry-After of 300 s with thousands of URLs waiting, a few hundred
//     URLs in retry backoff, a few hundred leased to a live node. Nothing
//     is due: every lease of it is an idle poll.
//
// Hosts have a skewed size (host k of n holds about 1/sqrt(k/n) times the
// mean), as real sites do.
//
// Last, it puts the URLs of a new campaign through every write a crawl
// makes of them (inserted as links, leased, claimed, committed with a page
// record) and reports time and WAL bytes per URL: what indexes cost.

// frontierPlan is one measured data set.
type frontierPlan struct {
	rows, hosts int
}

// campaigns' shares of the rows and hosts.
const busyShare = 0.8

// frontierStep is one thing a workflow's lease does, whose statements are
// explained together.
type frontierStep struct {
	name string
	run  func(ctx context.Context, s *store.Store) (string, error)
}

func runFrontier(args []string) error {
	o, err := parseFrontierFlags(args)
	if err != nil {
		return err
	}
	ctx := context.Background()
	serverLog := &logCapture{}
	url, s, stop, err := openFrontierDatabase(ctx, o.dir, serverLog)
	if err != nil {
		return err
	}
	defer stop()

	var report bytes.Buffer
	w := io.MultiWriter(os.Stdout, &report)
	fmt.Fprintf(w, "bench frontier: %s, Postgres %s, %d cores\n\n", time.Now().UTC().Format(time.RFC3339), serverVersion(ctx, s), runtime.NumCPU())
	if err := prepareFrontier(ctx, s, frontierPlan{rows: o.rows, hosts: o.hosts}, w); err != nil {
		return err
	}
	busy, tail, err := frontierCampaigns(ctx, s)
	if err != nil {
		return err
	}
	verdict := &planVerdict{}
	if o.want("plans") {
		if err := explainLeases(ctx, s, url, serverLog, busy, tail, w, verdict); err != nil {
			return err
		}
	}
	if o.want("times") {
		if err := timeAllLeases(ctx, s, busy, tail, o.leases, w); err != nil {
			return err
		}
	}
	if o.want("life") && o.lifePages > 0 {
		if err := reportLifecycles(ctx, s, o.lifePages, w); err != nil {
			return err
		}
	}
	if o.want("plans") {
		fmt.Fprintln(w, verdict)
		if verdict.failed() && o.rows < 1_000_000 {
			fmt.Fprintf(w, "(at %d rows sequential scans are the planner's right choice: judge at 10M)\n", o.rows)
		}
	}
	if err := writeReport(o.out, report.Bytes()); err != nil {
		return err
	}
	// On small tables the planner rightly prefers to read them whole.
	if verdict.failed() && o.rows >= 1_000_000 {
		return errors.New("a per-lease or per-poll statement scans a table")
	}
	return nil
}

// openFrontierDatabase starts Postgres, its cluster in dir if set and its
// log to serverLog, and opens its database "frontier"; stop closes both.
func openFrontierDatabase(ctx context.Context, dir string, serverLog io.Writer) (url string, s *store.Store, stop func(), err error) {
	pg, err := devstack.StartPostgres(ctx, devstack.PostgresOptions{Dir: dir, Output: serverLog})
	if err != nil {
		return "", nil, nil, err
	}
	if url, err = pg.CreateDatabase(ctx, "frontier"); err == nil {
		s, err = store.Open(ctx, url, 8, 10*time.Second)
	}
	if err != nil {
		pg.Stop()
		return "", nil, nil, err
	}
	return url, s, func() { s.Close(); pg.Stop() }, nil
}

// frontierOptions are the flags of `bench frontier`.
type frontierOptions struct {
	rows, hosts, leases int
	dir, out            string
	lifePages           int
	only                string
}

// want says whether the run includes part: plans, times or life.
func (o frontierOptions) want(part string) bool { return o.only == "" || o.only == part }

func parseFrontierFlags(args []string) (frontierOptions, error) {
	var o frontierOptions
	fs := flag.NewFlagSet("frontier", flag.ExitOnError)
	fs.IntVar(&o.rows, "rows", 10_000_000, "frontier rows to load")
	fs.IntVar(&o.hosts, "hosts", 100_000, "hosts to spread them over")
	fs.IntVar(&o.leases, "leases", 50, "leases timed per case")
	fs.StringVar(&o.dir, "dir", "", "cluster directory, kept and reused (loaded once) when set; default a temporary one")
	fs.StringVar(&o.out, "out", "../docs/scale-10m.txt", "report file")
	fs.IntVar(&o.lifePages, "life", 20_000, "URLs put through a whole crawl's writes, for the write cost per URL (0: none)")
	fs.StringVar(&o.only, "only", "", "run only this part: plans, times or life (default all)")
	fs.Parse(args)
	if o.rows < 10_000 || o.hosts < 100 || o.hosts > o.rows/10 {
		return o, fmt.Errorf("-rows must be >= 10000 and -hosts between 100 and rows/10, got %d rows, %d hosts", o.rows, o.hosts)
	}
	return o, nil
}

// reportLifecycles writes the write cost of pages URLs through a crawl,
// without and then with a processor.
func reportLifecycles(ctx context.Context, s *store.Store, pages int, w io.Writer) error {
	life, err := runLifecycle(ctx, s, pages, false)
	if err != nil {
		return fmt.Errorf("lifecycle: %w", err)
	}
	fmt.Fprintf(w, "== Write cost: %d URLs of a new campaign through a crawl's writes\n\n%s\n", pages, life)
	life, err = runLifecycle(ctx, s, pages, true)
	if err != nil {
		return fmt.Errorf("lifecycle with a processor: %w", err)
	}
	fmt.Fprintf(w, "== The same with every page to a no-op processor (make bench's: %s, bodies appended)\n\n%s\n", noopSettings(), life)
	return nil
}

// writeReport writes report to the file out, unless out is "".
func writeReport(out string, report []byte) error {
	if out == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(out, report, 0o644); err != nil {
		return err
	}
	fmt.Println("wrote", out)
	return nil
}

// explainLeases records the plans of a lease with work, an idle poll and
// a node's host claim.
func explainLeases(ctx context.Context, s *store.Store, url string, serverLog *logCapture, busy, tail store.HostLeaseParams,
	w io.Writer, verdict *planVerdict) error {
	// The first lease returns the rows of the dead node to pending: a
	// one-off, timed apart from the steady state.
	start := time.Now()
	first, err := s.LeaseHosts(ctx, busy)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "first lease of busy (also expires the dead node's rows): %d URLs in %s\n\n", first.Size(), time.Since(start).Round(time.Millisecond))
	if err := unlease(ctx, s, busy.CampaignKey, first.LeaseID); err != nil {
		return err
	}
	explained, err := store.Open(ctx, url+autoExplain, 2, 10*time.Second)
	if err != nil {
		return err
	}
	defer explained.Close()
	for _, step := range frontierSteps(s, busy, tail) {
		if err := setTailClock(ctx, s); err != nil {
			return err
		}
		stmts, err := explainStep(ctx, explained, serverLog, step)
		if err != nil {
			return fmt.Errorf("%s: %w", step.name, err)
		}
		printStep(w, step.name, stmts, verdict)
	}
	return nil
}

// timeAllLeases times LeaseHosts, with work and idle.
func timeAllLeases(ctx context.Context, s *store.Store, busy, tail store.HostLeaseParams, n int, w io.Writer) error {
	fmt.Fprintf(w, "== LeaseHosts end to end, %d leases each (no auto_explain)\n\n", n)
	for _, c := range []struct {
		name string
		p    store.HostLeaseParams
	}{{"busy: due work (10 nodes x 2 batches x 1000)", busy}, {"tail: idle poll (nothing due)", tail}} {
		if err := setTailClock(ctx, s); err != nil {
			return err
		}
		t, err := timeLeases(ctx, s, c.p.CampaignKey, n, func() (int64, int, error) {
			l, err := s.LeaseHosts(ctx, c.p)
			return l.LeaseID, l.Size(), err
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%-46s %s\n", c.name, t)
	}
	fmt.Fprintln(w)
	return nil
}

// prepareFrontier loads the frontier unless the database has it, migrates
// (timing a migration that meets the loaded rows), sets the clock and
// says what the frontier holds.
func prepareFrontier(ctx context.Context, s *store.Store, plan frontierPlan, w io.Writer) error {
	loaded, err := isLoaded(ctx, s, plan)
	if err != nil {
		return err
	}
	start := time.Now()
	applied, err := s.Migrate(ctx, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	if loaded && applied > 0 {
		fmt.Fprintf(w, "migrations applied to the loaded frontier: %d, in %s\n\n", applied, time.Since(start).Round(time.Millisecond))
	}
	if !loaded {
		if err := loadFrontier(ctx, s, plan, w); err != nil {
			return err
		}
	}
	if err := setClock(ctx, s); err != nil {
		return err
	}
	return describeFrontier(ctx, s, w)
}

// autoExplain makes every statement of the connection log its plan, with
// actual rows, timing and buffers: EXPLAIN (ANALYZE, BUFFERS) of what the
// store really runs.
const autoExplain = "&session_preload_libraries=auto_explain&auto_explain.log_min_duration=0" +
	"&auto_explain.log_analyze=on&auto_explain.log_buffers=on&auto_explain.log_timing=on"

// frontierSteps are what is explained; plain puts leases back, out of
// the plans.
func frontierSteps(plain *store.Store, busy, tail store.HostLeaseParams) []frontierStep {
	lease := func(p store.HostLeaseParams) func(context.Context, *store.Store) (string, error) {
		return func(ctx context.Context, s *store.Store) (string, error) {
			l, err := s.LeaseHosts(ctx, p)
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("%d URLs in %d batches, pending %d, leased elsewhere %d, next due %s",
				l.Size(), len(l.Batches), l.Pending, l.LeasedElsewhere, l.NextDue.D()), unlease(ctx, plain, p.CampaignKey, l.LeaseID)
		}
	}
	return []frontierStep{
		{"LeaseHosts, busy: due work", lease(busy)},
		{"LeaseHosts, tail: idle poll", lease(tail)},
		{"ClaimHosts and RenewHosts (a node, per batch's new hosts)", func(ctx context.Context, s *store.Store) (string, error) {
			holder := store.HolderToken("node-1", "inc")
			got, err := s.ClaimHosts(ctx, []string{"h5.busy.test"}, holder, time.Minute)
			if err != nil {
				return "", err
			}
			_, granted := got["h5.busy.test"]
			held, _, err := s.RenewHosts(ctx, holder, time.Minute, []store.HeldHost{{ShardKey: "h5.busy.test", Interval: time.Second}})
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("granted %v, still held %v", granted, held["h5.busy.test"]), s.ReleaseHost(ctx, holder, store.HeldHost{ShardKey: "h5.busy.test"})
		}},
	}
}

// unlease puts a lease's rows back as they were, so that every timed lease
// meets the same frontier: a plain release would leave them counted as
// leased once (first_leased_at), which they never were.
func unlease(ctx context.Context, s *store.Store, key, leaseID int64) error {
	_, err := s.Pool().Exec(ctx, `
		UPDATE frontier SET state = 'pending', lease_id = NULL, lease_expires_at = NULL, leased_at = NULL,
			first_leased_at = CASE WHEN first_leased_at = leased_at THEN NULL ELSE first_leased_at END
		WHERE campaign = $1 AND lease_id = $2 AND state = 'leased'`, key, leaseID)
	if err != nil {
		return fmt.Errorf("put back lease %d: %w", leaseID, err)
	}
	return nil
}

func frontierCampaigns(ctx context.Context, s *store.Store) (busy, tail store.HostLeaseParams, err error) {
	var nodes []campaign.LeaseNode
	for i := range 10 {
		nodes = append(nodes, campaign.LeaseNode{ID: fmt.Sprintf("node-%d", i), Weight: 1, Batches: 2})
	}
	p := store.HostLeaseParams{Nodes: nodes, BatchSize: 1000, Horizon: 4 * time.Second, TTL: time.Minute,
		MinDelay: time.Second, Concurrency: 2}
	busy, tail = p, p
	if busy.CampaignKey, err = s.CampaignKey(ctx, "busy"); err != nil {
		return busy, tail, err
	}
	tail.CampaignKey, err = s.CampaignKey(ctx, "tail")
	return busy, tail, err
}

// leaseTimes are the latencies of repeated leases.
type leaseTimes struct {
	d    []time.Duration
	urls int
}

func (t leaseTimes) String() string {
	slices.Sort(t.d)
	q := func(f float64) time.Duration {
		return t.d[min(len(t.d)-1, int(f*float64(len(t.d))))].Round(10 * time.Microsecond)
	}
	return fmt.Sprintf("median %8s  p95 %8s  max %8s  (%d URLs a lease)", q(0.5), q(0.95), t.d[len(t.d)-1].Round(10*time.Microsecond), t.urls/len(t.d))
}

// timeLeases times n leases, each handed back after it: lease returns
// the lease's ID and size.
func timeLeases(ctx context.Context, s *store.Store, key int64, n int, lease func() (int64, int, error)) (leaseTimes, error) {
	var t leaseTimes
	for range n {
		start := time.Now()
		id, size, err := lease()
		if err != nil {
			return t, err
		}
		t.d = append(t.d, time.Since(start))
		t.urls += size
		if err := unlease(ctx, s, key, id); err != nil {
			return t, err
		}
	}
	return t, nil
}

// isLoaded says whether the database holds this plan's frontier already.
func isLoaded(ctx context.Context, s *store.Store, plan frontierPlan) (bool, error) {
	var rows int64
	err := s.Pool().QueryRow(ctx, `SELECT coalesce((SELECT rows FROM bench_frontier), -1)`).Scan(&rows)
	var pe interface{ SQLState() string }
	if errors.As(err, &pe) && pe.SQLState() == "42P01" { // no such table: a fresh database
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("check for a loaded frontier: %w", err)
	}
	if rows != int64(plan.rows) {
		return false, fmt.Errorf("the cluster holds a frontier of %d rows, not %d: use another -dir", rows, plan.rows)
	}
	return true, nil
}

// loadFrontier fills the frontier. Indexes are dropped during the load and
// built again after it, as their definitions were: a sorted build is many
// times faster than 10M random inserts, and gives the same indexes.
func loadFrontier(ctx context.Context, s *store.Store, plan frontierPlan, w io.Writer) error {
	start := time.Now()
	db := s.Pool()
	spec, err := campaign.Spec{Seeds: []string{"http://h1.busy.test/"},
		Politeness: campaign.Politeness{MinDelay: campaign.Duration(time.Second), MaxConcurrencyPerHost: 2}}.Normalize()
	if err != nil {
		return err
	}
	type part struct {
		name        string
		key         int64
		rows, hosts int
		load        string
	}
	busyHosts := int(float64(plan.hosts) * busyShare)
	busyRows := int(float64(plan.rows) * busyShare)
	parts := []*part{
		{name: "busy", rows: busyRows, hosts: busyHosts, load: loadBusy},
		{name: "tail", rows: plan.rows - busyRows, hosts: plan.hosts - busyHosts, load: loadTail},
	}
	for _, p := range parts {
		if p.key, _, err = s.CreateCampaign(ctx, p.name, spec); err != nil {
			return err
		}
	}
	indexes, err := dropIndexes(ctx, s, "frontier")
	if err != nil {
		return err
	}
	conn, err := db.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	// Rows are made to reference what exists: checking 20M foreign keys
	// one by one would only slow the load.
	if _, err := conn.Exec(ctx, `SET session_replication_role = replica`); err != nil {
		return fmt.Errorf("load without foreign-key checks: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), `RESET session_replication_role`) //nolint:errcheck
	for _, p := range parts {
		if _, err := conn.Exec(ctx, loadHosts, p.key, p.name, p.hosts); err != nil {
			return fmt.Errorf("load hosts of %s: %w", p.name, err)
		}
		const chunk = 1_000_000
		for from := 1; from <= p.rows; from += chunk {
			to := min(from+chunk-1, p.rows)
			if _, err := conn.Exec(ctx, p.load, p.key, p.name, p.hosts, from, to); err != nil {
				return fmt.Errorf("load rows %d-%d of %s: %w", from, to, p.name, err)
			}
			fmt.Fprintf(os.Stderr, "loaded %s rows %d of %d (%s)\n", p.name, to, p.rows, time.Since(start).Round(time.Second))
		}
	}
	buildStart := time.Now()
	for _, def := range indexes {
		if _, err := db.Exec(ctx, def); err != nil {
			return fmt.Errorf("build index %q: %w", def, err)
		}
	}
	built := time.Since(buildStart)
	if _, err := db.Exec(ctx, `VACUUM (ANALYZE) frontier, hosts, host_state, holders, campaigns`); err != nil {
		return fmt.Errorf("vacuum: %w", err)
	}
	if _, err := db.Exec(ctx, `CREATE TABLE bench_frontier AS SELECT $1::bigint AS rows`, plan.rows); err != nil {
		return err
	}
	fmt.Fprintf(w, "loaded %d rows over %d hosts in %s (frontier indexes built in %s)\n\n",
		plan.rows, plan.hosts, time.Since(start).Round(time.Second), built.Round(time.Second))
	return nil
}

// dropIndexes drops table's indexes but its primary key and unique
// constraints, and returns their definitions.
func dropIndexes(ctx context.Context, s *store.Store, table string) ([]string, error) {
	rows, err := s.Pool().Query(ctx, `
		SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid) FROM pg_index i
		WHERE i.indrelid = $1::regclass AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)`, table)
	if err != nil {
		return nil, fmt.Errorf("list indexes of %s: %w", table, err)
	}
	idx, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([2]string, error) {
		var nameDef [2]string
		err := r.Scan(&nameDef[0], &nameDef[1])
		return nameDef, err
	})
	if err != nil {
		return nil, fmt.Errorf("list indexes of %s: %w", table, err)
	}
	var defs []string
	for _, i := range idx {
		if _, err := s.Pool().Exec(ctx, "DROP INDEX "+i[0]); err != nil {
			return nil, fmt.Errorf("drop index %s: %w", i[0], err)
		}
		defs = append(defs, i[1])
	}
	return defs, nil
}

// loadHosts: $1 campaign, $2 its name, $3 hosts. One host in 400 of busy
// is paused for a day; tail's largest host (h1) by a Retry-After of 300 s.
const loadHosts = `
	WITH h AS (
		INSERT INTO hosts (campaign, shard_key, last_leased_at)
		SELECT $1, 'h' || g || '.' || $2 || '.test',
		       CASE WHEN g % 10 = 0 THEN NULL ELSE now() - (abs(hashint4(g::int)) % 86400) * interval '1 second' END
		FROM generate_series(1, $3::int) g
		RETURNING shard_key
	)
	INSERT INTO host_state (shard_key, paused_until, interval_ms, latency_ms)
	SELECT shard_key, CASE
			WHEN $2 = 'busy' AND n % 400 = 7 THEN now() + interval '1 day'
			WHEN $2 = 'tail' AND shard_key = 'h1.tail.test' THEN now() + interval '300 seconds'
			ELSE '-infinity' END,
		1000, 50 + abs(hashint4(n::int)) % 750
	FROM (SELECT shard_key, row_number() OVER () AS n FROM h) h`

// frontierRow is the part of both loads that picks a row's host (skewed:
// density falls as 1/sqrt of the host's rank) and random numbers u (its
// state) and v (what kind of pending or leased). $1 campaign, $2 name,
// $3 hosts, $4..$5 row numbers.
const frontierRow = `
	SELECT $1::bigint AS campaign, g,
	       hashint8extended(g, $1::bigint) AS fingerprint,
	       1 + floor($3::int * power((abs(hashint8extended(g, 7)) % 1000003) / 1000003.0, 2))::int AS host,
	       (abs(hashint8extended(g, 11)) % 100000) / 100000.0 AS u,
	       (abs(hashint8extended(g, 13)) % 100000) / 100000.0 AS v,
	       now() - interval '2 days' + (g % 86400) * interval '1 second' AS found
	FROM generate_series($4::bigint, $5::bigint) g`

const frontierInsert = `
	INSERT INTO frontier (campaign, fingerprint, url, host_id, shard_key, depth, state, attempts, next_attempt_at,
		first_leased_at, leased_at, lease_id, lease_holder, lease_expires_at, node, last_status, last_error,
		discovered_at, finished_at)
	SELECT r.campaign, r.fingerprint, 'http://' || h.shard_key || '/p/' || r.g || '.html', h.id, h.shard_key,
	       r.g % 6, x.state, x.attempts, x.next_at, x.first_leased, x.leased_at, x.lease_id, x.holder, x.expires,
	       x.node, x.status, x.error, r.found, x.finished
	FROM (` + frontierRow + `) r
	JOIN hosts h ON h.campaign = $1 AND h.shard_key = 'h' || r.host || '.' || $2 || '.test'
	CROSS JOIN LATERAL (:states) x
	ON CONFLICT DO NOTHING`

// loadBusy: 55% fetched, 3% failed, 2% excluded, 1.5% leased, the rest
// pending; of the pending 5% in retry backoff (up to 10 minutes) and 2%
// handed back and due. Leased rows: 80% claimed by one of 20 nodes (one
// of them dead), 20% not yet claimed (0.2% of those expired: see
// setClock).
var loadBusy = strings.Replace(frontierInsert, ":states", `
	SELECT s.state::url_state, s.attempts, s.next_at, s.first_leased, s.leased_at, s.lease_id, s.holder, s.expires,
	       s.node, s.status, s.error, s.finished
	FROM (SELECT
		CASE WHEN r.u < 0.55 THEN 'fetched' WHEN r.u < 0.58 THEN 'failed' WHEN r.u < 0.60 THEN 'excluded'
		     WHEN r.u < 0.615 THEN 'leased' ELSE 'pending' END AS state,
		CASE WHEN r.u < 0.60 OR r.v < 0.07 THEN 1 ELSE 0 END AS attempts,
		CASE WHEN r.u >= 0.615 AND r.v < 0.05 THEN now() + (1 + r.g % 600) * interval '1 second' ELSE r.found END AS next_at,
		CASE WHEN r.u < 0.615 OR r.v < 0.07 THEN r.found + interval '1 hour' END AS first_leased,
		CASE WHEN r.u >= 0.60 AND r.u < 0.615 THEN now() - interval '10 seconds' END AS leased_at,
		CASE WHEN r.u >= 0.60 AND r.u < 0.615 THEN 1 + r.g % 1000 END AS lease_id,
		CASE WHEN r.u >= 0.60 AND r.u < 0.615 AND r.v < 0.8 THEN 'node-' || (r.g % 20) || '@inc' END AS holder,
		CASE WHEN r.u >= 0.60 AND r.u < 0.615 THEN now() + interval '5 minutes' END AS expires,
		CASE WHEN r.u < 0.615 THEN 'node-' || (r.g % 20) END AS node,
		CASE WHEN r.u < 0.55 THEN 200 WHEN r.u < 0.58 THEN 404 WHEN r.u >= 0.615 AND r.v < 0.05 THEN 503 END AS status,
		CASE WHEN r.u >= 0.58 AND r.u < 0.60 THEN 'out of scope' END AS error,
		CASE WHEN r.u < 0.60 THEN r.found + interval '1 hour' END AS finished) s`, 1)

// loadTail: everything fetched (2% failed, 2% excluded) but h1's URLs
// (paused), 0.025% in retry backoff (see setTailClock) and 0.015% leased
// to a live node.
var loadTail = strings.Replace(frontierInsert, ":states", `
	SELECT s.state::url_state, s.attempts, s.next_at, s.first_leased, s.leased_at, s.lease_id, s.holder, s.expires,
	       s.node, s.status, s.error, s.finished
	FROM (SELECT k.state,
		CASE WHEN k.state = 'pending' AND r.host = 1 THEN 0 ELSE 1 END AS attempts,
		CASE WHEN k.state = 'pending' AND r.host <> 1 THEN now() + (120 + r.g % 480) * interval '1 second' ELSE r.found END AS next_at,
		CASE WHEN k.state <> 'pending' OR r.host <> 1 THEN r.found + interval '1 hour' END AS first_leased,
		CASE WHEN k.state = 'leased' THEN now() - interval '10 seconds' END AS leased_at,
		CASE WHEN k.state = 'leased' THEN 2000 + r.g % 10 END AS lease_id,
		CASE WHEN k.state = 'leased' THEN 'node-0@inc' END AS holder,
		CASE WHEN k.state = 'leased' THEN now() + interval '5 minutes' END AS expires,
		CASE WHEN k.state <> 'pending' OR r.host <> 1 THEN 'node-' || (r.g % 20) END AS node,
		CASE WHEN k.state = 'fetched' THEN 200 WHEN k.state = 'failed' THEN 404
		     WHEN k.state = 'pending' AND r.host <> 1 THEN 503 END AS status,
		CASE WHEN k.state = 'excluded' THEN 'out of scope' END AS error,
		CASE WHEN k.state IN ('fetched', 'failed', 'excluded') THEN r.found + interval '1 hour' END AS finished
	FROM (SELECT CASE WHEN r.host = 1 OR r.u < 0.00025 THEN 'pending' WHEN r.u < 0.0004 THEN 'leased'
	                  WHEN r.u < 0.02 THEN 'failed' WHEN r.u < 0.04 THEN 'excluded' ELSE 'fetched' END::url_state AS state) k) s`, 1)

// loadHolders: nodes 0 to 18 alive, node 19 dead an hour ago.
const loadHolders = `
	INSERT INTO holders (holder, alive_until)
	SELECT 'node-' || n || '@inc', CASE WHEN n < 19 THEN now() + interval '1 day' ELSE now() - interval '1 hour' END
	FROM generate_series(0, 19) n
	ON CONFLICT (holder) DO UPDATE SET alive_until = EXCLUDED.alive_until`

// setClock makes what depends on the time true now, at every run of a kept
// cluster too: busy's retries due in 1 to 600 s (some come due during the
// run: churn, as in a crawl), the day-long pauses, leases expiring in 5
// minutes but for 0.2% of busy's unclaimed ones, expired, and the nodes
// alive but node 19. Then setTailClock.
func setClock(ctx context.Context, s *store.Store) error {
	for _, q := range []string{
		`UPDATE frontier f SET next_attempt_at = now() + (1 + f.id % 600) * interval '1 second'
		 FROM campaigns c WHERE c.key = f.campaign AND c.id = 'busy' AND f.state = 'pending' AND f.last_status = 503`,
		`UPDATE frontier SET leased_at = now() - interval '10 seconds',
			lease_expires_at = CASE WHEN lease_holder IS NULL AND lease_id % 500 = 0 THEN now() - interval '1 second' ELSE now() + interval '5 minutes' END
		 WHERE state = 'leased'`,
		`UPDATE host_state SET paused_until = now() + interval '1 day' WHERE paused_until > '-infinity'`,
		loadHolders,
		// Leases of the run get IDs the loaded leases (1 to 2009) never had.
		`SELECT setval('lease_ids', greatest(1000000, (SELECT last_value FROM lease_ids)))`,
		`VACUUM (ANALYZE) frontier, host_state`,
	} {
		if _, err := s.Pool().Exec(ctx, q); err != nil {
			return fmt.Errorf("set the clock: %w", err)
		}
	}
	return setTailClock(ctx, s)
}

// setTailClock keeps tail idle for the next few minutes: its retries due
// in 120 to 600 s, its largest host paused by a Retry-After of 300 s from
// now. It runs before each measure of tail, so a long run never finds
// them due.
func setTailClock(ctx context.Context, s *store.Store) error {
	for _, q := range []string{
		`UPDATE frontier f SET next_attempt_at = now() + (120 + f.id % 480) * interval '1 second'
		 FROM campaigns c WHERE c.key = f.campaign AND c.id = 'tail' AND f.state = 'pending' AND f.last_status = 503`,
		`UPDATE host_state SET paused_until = now() + interval '300 seconds' WHERE shard_key = 'h1.tail.test'`,
	} {
		if _, err := s.Pool().Exec(ctx, q); err != nil {
			return fmt.Errorf("set the tail's clock: %w", err)
		}
	}
	return nil
}

// describeFrontier prints what the frontier holds and what its indexes
// weigh.
func describeFrontier(ctx context.Context, s *store.Store, w io.Writer) error {
	db := s.Pool()
	rows, err := db.Query(ctx, `
		SELECT c.id, f.state::text, count(*), count(*) FILTER (WHERE f.next_attempt_at > now()),
		       count(*) FILTER (WHERE f.state = 'leased' AND f.lease_holder IS NULL)
		FROM frontier f JOIN campaigns c ON c.key = f.campaign GROUP BY 1, 2 ORDER BY 1, 2`)
	if err != nil {
		return fmt.Errorf("describe frontier: %w", err)
	}
	fmt.Fprintln(w, "campaign  state       rows       due later  unclaimed")
	for rows.Next() {
		var id, state string
		var n, later, unclaimed int64
		if err := rows.Scan(&id, &state, &n, &later, &unclaimed); err != nil {
			rows.Close()
			return err
		}
		fmt.Fprintf(w, "%-9s %-9s %10d %11d %10d\n", id, state, n, later, unclaimed)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("describe frontier: %w", err)
	}
	var hosts, paused int64
	if err := db.QueryRow(ctx, `SELECT (SELECT count(*) FROM hosts), (SELECT count(*) FROM host_state WHERE paused_until > now())`).
		Scan(&hosts, &paused); err != nil {
		return fmt.Errorf("count hosts: %w", err)
	}
	fmt.Fprintf(w, "hosts %d, paused now %d\n\n", hosts, paused)
	rows, err = db.Query(ctx, `
		SELECT c.relname, pg_relation_size(c.oid), coalesce(pg_get_expr(i.indpred, i.indrelid), '')
		FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid
		WHERE i.indrelid IN ('frontier'::regclass, 'hosts'::regclass, 'host_state'::regclass)
		ORDER BY i.indrelid::regclass::text, c.relname`)
	if err != nil {
		return fmt.Errorf("index sizes: %w", err)
	}
	var tableSize int64
	if err := db.QueryRow(ctx, `SELECT pg_relation_size('frontier')`).Scan(&tableSize); err != nil {
		return fmt.Errorf("table size: %w", err)
	}
	fmt.Fprintf(w, "frontier heap %s\n", mib(tableSize))
	for rows.Next() {
		var name, pred string
		var size int64
		if err := rows.Scan(&name, &size, &pred); err != nil {
			rows.Close()
			return err
		}
		if pred != "" {
			pred = "WHERE " + pred
		}
		fmt.Fprintf(w, "  %-32s %9s  %s\n", name, mib(size), pred)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("index sizes: %w", err)
	}
	fmt.Fprintln(w)
	return nil
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func serverVersion(ctx context.Context, s *store.Store) string {
	var v string
	if err := s.Pool().QueryRow(ctx, `SHOW server_version`).Scan(&v); err != nil {
		return "?"
	}
	return v
}

// explainedStatement is one statement auto_explain logged.
type explainedStatement struct {
	query    string
	duration string
	plan     string
}

// explainStep runs a step on the explaining store and collects the plans
// its statements logged, up to a marker statement run after it.
func explainStep(ctx context.Context, s *store.Store, log *logCapture, step frontierStep) ([]explainedStatement, error) {
	from := log.len()
	what, err := step.run(ctx, s)
	if err != nil {
		return nil, err
	}
	// The plan of a literal names the literal: its entry closes the step's.
	marker := fmt.Sprintf("bench frontier: end of step at %d", time.Now().UnixNano())
	if _, err := s.Pool().Exec(ctx, "SELECT '"+marker+"'"); err != nil {
		return nil, err
	}
	text, err := log.waitFor(ctx, from, marker, 30*time.Second)
	if err != nil {
		return nil, err
	}
	stmts := parseAutoExplain(text)
	return append([]explainedStatement{{query: "result: " + what}}, stmts...), nil
}

var (
	logEntryStart = regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d`)
	durationRe    = regexp.MustCompile(`duration: ([0-9.]+ ms)\s+plan:`)
	seqScanRe     = regexp.MustCompile(`Seq Scan on (frontier|hosts|host_state|pages)\b`)
	buffersRe     = regexp.MustCompile(`Buffers: shared (?:hit=(\d+))?\s*(?:read=(\d+))?`)
)

// parseAutoExplain splits server log text into auto_explain's entries.
func parseAutoExplain(text string) []explainedStatement {
	var out []explainedStatement
	var entry []string
	flush := func() {
		if st, ok := parseEntry(strings.Join(entry, "\n")); ok {
			out = append(out, st)
		}
		entry = nil
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		if logEntryStart.MatchString(sc.Text()) {
			flush()
		}
		entry = append(entry, sc.Text())
	}
	flush()
	return out
}

// parseEntry reads one log entry as auto_explain's: its duration, then
// its query text up to the plan's first line, then the plan.
func parseEntry(entry string) (explainedStatement, bool) {
	m := durationRe.FindStringSubmatch(entry)
	if m == nil {
		return explainedStatement{}, false // another message, or the marker's cut short
	}
	_, body, _ := strings.Cut(entry, "plan:")
	var query, plan []string
	for _, l := range strings.Split(body, "\n") {
		l = strings.TrimPrefix(l, "\t")
		switch {
		case len(plan) == 0 && !looksLikePlanLine(l):
			query = append(query, strings.TrimPrefix(l, "Query Text: "))
		default:
			plan = append(plan, l)
		}
	}
	if len(plan) == 0 {
		return explainedStatement{}, false
	}
	return explainedStatement{query: compactSQL(strings.Join(query, "\n")), duration: m[1], plan: strings.Join(plan, "\n")}, true
}

// looksLikePlanLine tells the first line of a plan from the query text.
func looksLikePlanLine(l string) bool {
	t := strings.TrimLeft(l, " ->")
	return strings.Contains(l, "(cost=") || strings.Contains(t, "(actual time=") ||
		strings.HasPrefix(t, "Planning") || strings.HasPrefix(t, "Execution")
}

// compactSQL folds a statement onto few lines for the report.
func compactSQL(q string) string {
	var b strings.Builder
	for _, l := range strings.Split(q, "\n") {
		if l = strings.TrimSpace(l); l == "" || strings.HasPrefix(l, "--") {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(l)
	}
	return b.String()
}

// planVerdict gathers what the plans show against the rule: no statement
// of a lease or an idle poll scans frontier, hosts or host_state.
type planVerdict struct {
	seqScans []string
	heaviest struct {
		buffers int64
		step    string
		query   string
	}
}

func (v *planVerdict) failed() bool { return len(v.seqScans) > 0 }

func (v *planVerdict) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "heaviest statement: %d buffers (8 KiB pages touched), in %q: %.120s\n", v.heaviest.buffers, v.heaviest.step, v.heaviest.query)
	if v.failed() {
		fmt.Fprintf(&b, "FAIL: sequential scans of big tables:\n  %s\n", strings.Join(v.seqScans, "\n  "))
	} else {
		b.WriteString("PASS: no statement of a lease, an idle poll or a host claim scans frontier, hosts or host_state sequentially\n")
	}
	return b.String()
}

// buffersOf is the pages a statement touched: its plan's first Buffers
// line, which is the root's and counts its children.
func buffersOf(plan string) int64 {
	m := buffersRe.FindStringSubmatch(plan)
	if m == nil {
		return 0
	}
	hit, _ := strconv.ParseInt(m[1], 10, 64)
	read, _ := strconv.ParseInt(m[2], 10, 64)
	return hit + read
}

func printStep(w io.Writer, name string, stmts []explainedStatement, v *planVerdict) {
	fmt.Fprintf(w, "== %s\n", name)
	for _, st := range stmts {
		if st.plan == "" {
			fmt.Fprintf(w, "%s\n\n", st.query)
			continue
		}
		buf := buffersOf(st.plan)
		fmt.Fprintf(w, "-- %s, %d buffers: %s\n%s\n\n", st.duration, buf, st.query, st.plan)
		for _, m := range seqScanRe.FindAllString(st.plan, -1) {
			v.seqScans = append(v.seqScans, fmt.Sprintf("%s in %q: %.100s", m, name, st.query))
		}
		if buf > v.heaviest.buffers {
			v.heaviest.buffers, v.heaviest.step, v.heaviest.query = buf, name, st.query
		}
	}
}

// logCapture keeps the server's log.
type logCapture struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logCapture) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logCapture) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Len()
}

// waitFor returns the log from offset from up to the entry holding marker,
// once the server has written it.
func (l *logCapture) waitFor(ctx context.Context, from int, marker string, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	for {
		l.mu.Lock()
		text := l.buf.String()[from:]
		l.mu.Unlock()
		if i := strings.Index(text, marker); i >= 0 {
			return text[:i], nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("the server log has no plan of the marker statement after %s: is auto_explain loaded?", timeout)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// lifecycle is what the database spends on URLs from discovery to page
// record, as nodes drive it, phase by phase.
type lifecycle struct {
	pages  int
	phases []lifePhase
}

type lifePhase struct {
	name string
	d    time.Duration
	wal  int64 // bytes
}

func (l lifecycle) String() string {
	var b strings.Builder
	var total lifePhase
	for _, p := range append(l.phases, lifePhase{name: "all"}) {
		if p.name == "all" {
			p = total
			p.name = "all"
		}
		total.d += p.d
		total.wal += p.wal
		fmt.Fprintf(&b, "  %-48s %9s  %7.1f µs/URL  %6.0f WAL bytes/URL\n", p.name, p.d.Round(time.Millisecond),
			float64(p.d.Microseconds())/float64(l.pages), float64(p.wal)/float64(l.pages))
	}
	return b.String()
}

// runLifecycle puts pages URLs of a new campaign through what a crawl does
// to each: inserted as links of commits of 64 pages (20 links a page, one
// of them new), leased, claimed, committed as fetched with a page record.
// It measures time and WAL written, on a frontier of millions of rows.
// With processor, each page also goes to a processor: its commit keeps a
// body of 1,200 bytes for it, and its batches are leased, read and stored.
func runLifecycle(ctx context.Context, s *store.Store, pages int, processor bool) (lifecycle, error) {
	r, err := newLifeRun(ctx, s, pages, processor)
	if err != nil {
		return lifecycle{pages: pages}, err
	}
	if err := r.phase("insert as new links (64 pages' worth a commit)", r.insertLinks); err != nil {
		return r.life, err
	}
	var leases []campaign.HostLease
	err = r.phase("lease (LeaseHosts, 20,000 URLs a lease)", func() (err error) { leases, err = r.leaseAll(); return err })
	if err != nil {
		return r.life, err
	}
	var claimed []store.ClaimedURL
	err = r.phase("claim (a batch of 1,000 at a time)", func() (err error) { claimed, err = r.claimAll(leases); return err })
	if err != nil {
		return r.life, err
	}
	err = r.phase("commit: outcome, page record, 20 links (1 new)", func() error { return r.commitAll(claimed) })
	if err != nil || !processor {
		return r.life, err
	}
	err = processorLifecycle(ctx, s, r.key, pages, r.phase)
	return r.life, err // with the processor's phases
}

// The lifecycle's frontier: links spread over lifeHosts hosts, committed
// lifePerCommit pages at a time, each page with lifeLinksPerPage links.
const lifeHosts, lifePerCommit, lifeLinksPerPage = 2000, 64, 20

// lifeRun is one runLifecycle: its campaign, and the phases measured so
// far. Its URLs are leased to ten nodes and claimed and committed by
// node-0.
type lifeRun struct {
	ctx       context.Context
	s         *store.Store
	key       int64
	pages     int
	processor bool
	holder    string
	life      lifecycle
}

// newLifeRun creates the campaign, with the no-op processor if processor.
func newLifeRun(ctx context.Context, s *store.Store, pages int, processor bool) (*lifeRun, error) {
	base := campaign.Spec{Seeds: []string{"http://l0.life.test/"}}
	if processor {
		base.Processors = []campaign.Processor{noopProcessor}
		base.Processors[0].TaskQueue = "life.noop"
	}
	spec, err := base.Normalize()
	if err != nil {
		return nil, err
	}
	key, _, err := s.CreateCampaign(ctx, fmt.Sprintf("life-%d", time.Now().UnixNano()), spec)
	if err != nil {
		return nil, err
	}
	return &lifeRun{ctx: ctx, s: s, key: key, pages: pages, processor: processor,
		holder: store.HolderToken("node-0", "inc"), life: lifecycle{pages: pages}}, nil
}

// link is the campaign's i-th URL.
func (r *lifeRun) link(i int) store.NewURL {
	u, _ := crawl.Canonicalize(fmt.Sprintf("http://h%d.life%d.test/p%d.html", i%lifeHosts, r.key, i))
	return store.NewURL{Fingerprint: u.Fingerprint(), URL: u.String, ShardKey: u.Host, Depth: 1}
}

// phase runs fn and records its time and the WAL it wrote.
func (r *lifeRun) phase(name string, fn func() error) error {
	var before string
	if err := r.s.Pool().QueryRow(r.ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&before); err != nil {
		return err
	}
	start := time.Now()
	if err := fn(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	p := lifePhase{name: name, d: time.Since(start)}
	if err := r.s.Pool().QueryRow(r.ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)::bigint`, before).Scan(&p.wal); err != nil {
		return err
	}
	r.life.phases = append(r.life.phases, p)
	return nil
}

// insertLinks inserts every URL as new links, a commit's worth at a time.
func (r *lifeRun) insertLinks() error {
	batch := make([]store.NewURL, 0, lifePerCommit*lifeLinksPerPage)
	for i := range r.pages {
		batch = append(batch, r.link(i))
		if len(batch) == cap(batch) || i == r.pages-1 {
			if _, err := r.s.InsertURLs(r.ctx, r.key, batch); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	return nil
}

// leaseAll leases hosts to ten nodes until every URL is leased.
func (r *lifeRun) leaseAll() ([]campaign.HostLease, error) {
	var nodes []campaign.LeaseNode
	for i := range 10 {
		nodes = append(nodes, campaign.LeaseNode{ID: fmt.Sprintf("node-%d", i), Weight: 1, Batches: 2})
	}
	var leases []campaign.HostLease
	for n := 0; n < r.pages; {
		l, err := r.s.LeaseHosts(r.ctx, store.HostLeaseParams{CampaignKey: r.key, Nodes: nodes, BatchSize: 1000,
			Horizon: 4 * time.Second, TTL: 5 * time.Minute})
		if err != nil {
			return nil, err
		}
		if l.Size() == 0 {
			return nil, fmt.Errorf("leased %d URLs of %d, then nothing", n, r.pages)
		}
		n += l.Size()
		leases = append(leases, l)
	}
	return leases, nil
}

// claimAll claims every leased batch for node-0.
func (r *lifeRun) claimAll(leases []campaign.HostLease) ([]store.ClaimedURL, error) {
	var claimed []store.ClaimedURL
	for _, l := range leases {
		for _, b := range l.Batches {
			var ids []int64
			for _, g := range b.Groups {
				ids = append(ids, g.IDs...)
			}
			c, err := r.s.Claim(r.ctx, r.key, l.LeaseID, ids, r.holder, "node-0", 5*time.Minute)
			if err != nil {
				return nil, err
			}
			claimed = append(claimed, c...)
		}
	}
	return claimed, nil
}

// commitAll commits the claimed URLs as fetched pages, lifePerCommit at a
// time, each with its links: lifeLinksPerPage-1 known ones and one new.
func (r *lifeRun) commitAll(claimed []store.ClaimedURL) error {
	body := bytes.Repeat([]byte("<p>a page of the synthetic web</p>\n"), 1200/36)
	next := r.pages
	for i := 0; i < len(claimed); i += lifePerCommit {
		var outcomes []store.Outcome
		var links []store.NewURL
		for j, c := range claimed[i:min(i+lifePerCommit, len(claimed))] {
			outcomes = append(outcomes, r.fetched(c, body))
			for k := range lifeLinksPerPage - 1 {
				links = append(links, r.link(((i+j)*7+k*13)%r.pages))
			}
			links = append(links, r.link(next))
			next++
		}
		if _, err := r.s.Commit(r.ctx, r.key, r.holder, "node-0", outcomes, links); err != nil {
			return err
		}
	}
	return nil
}

// fetched is c's outcome as a fetched page, keeping body for the
// processor if there is one.
func (r *lifeRun) fetched(c store.ClaimedURL, body []byte) store.Outcome {
	o := store.Outcome{ID: c.ID, State: store.Fetched, Attempted: true, Status: 200,
		Page: &store.Page{Status: 200, ContentType: "text/html", ContentLength: 20_000, Links: lifeLinksPerPage,
			Title: "a page", FetchedAt: time.Now(), Duration: 80 * time.Millisecond}}
	if r.processor {
		o.Body = &store.PageBody{Processors: []string{noopProcessor.Name}, URL: c.URL, Depth: c.Depth, FinalURL: "http://x.test/",
			Status: 200, Header: http.Header{"Content-Type": {"text/html"}, "Etag": {`"x"`}}, ContentType: "text/html",
			FetchedAt: time.Now(), Body: body}
	}
	return o
}

// processorLifecycle puts a campaign's pages through its no-op processor
// as make bench's goes: leased by reference in batches held by their
// rows, read with their bodies, stored with nothing made.
func processorLifecycle(ctx context.Context, s *store.Store, key int64, pages int, phase func(string, func() error) error) error {
	p := noopProcessor
	var leases []store.Lease
	var tokens []string
	err := phase(fmt.Sprintf("processor: lease batches of %d (held)", p.BatchSize), func() error {
		for n, seq := 0, int64(1); n < pages; seq++ {
			l := store.Lease{CampaignKey: key, CampaignID: "life", Processor: p.Name, ID: 1<<32 | seq<<8}
			b, err := s.LeaseBatch(ctx, l, p.BatchSize, p.MaxPending+1)
			if err != nil {
				return err
			}
			if len(b.IDs) == 0 {
				return fmt.Errorf("leased %d pages of %d, then nothing", n, pages)
			}
			n += len(b.IDs)
			leases, tokens = append(leases, l), append(tokens, b.Token)
		}
		return nil
	})
	if err != nil {
		return err
	}
	var read [][]int64
	err = phase("processor: read each batch, bodies inline", func() error {
		for _, t := range tokens {
			b, err := s.BatchByToken(ctx, t, campaign.MaxInlineBodyLimit, activities.BatchBodyBytes)
			if err != nil {
				return err
			}
			var ids []int64
			for _, pg := range b.Pages {
				ids = append(ids, pg.ID)
			}
			read = append(read, ids)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return phase("processor: store each batch's outcome (nothing made)", func() error {
		for i, l := range leases {
			results := make([]store.Processed, len(read[i]))
			for j, id := range read[i] {
				results[j].ID = id
			}
			if _, err := s.StoreProcessed(ctx, l, results); err != nil {
				return err
			}
		}
		return nil
	})
}
