// Package store owns spiderpool's Postgres state: migrations, the frontier
// (leases, claims, results, discovered links), pages, the node registry and
// the ring history. Postgres is the truth; every other copy is a cache.
package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/spiderpool/spiderpool/config"
	"github.com/spiderpool/spiderpool/retry"
	"github.com/spiderpool/spiderpool/schema"
)

// Store is a pool of connections to the spiderpool database.
type Store struct {
	pool  dbPool
	where string
	// knownHosts caches (campaign, shard key) pairs that have a hosts row,
	// so inserting links skips the hosts upsert once a host is known.
	knownHosts sync.Map
	// stats keeps the planner's statistics of the frontier up with its
	// growth (see analyzeAsItGrows).
	stats tableStats
	// pooled: the URL reaches Postgres through a transaction pooler.
	pooled bool
}

// Open connects to the database at url and checks it answers within
// timeout. The error says which server it could not reach.
func Open(ctx context.Context, url string, maxConns int32, timeout time.Duration) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database URL %q is not valid: %w", config.RedactDatabaseURL(url), err)
	}
	where := Where(cfg.ConnConfig.Config)
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	cfg.ConnConfig.ConnectTimeout = timeout
	// Every statement here is short, and planned on estimates: the
	// recursive walk of a host lease was estimated past jit_above_cost and
	// compiled at each call, 13-21 ms of CPU for a query that runs in
	// less (45 compiles, 586 ms, in a 60,000-page bench crawl). A URL's
	// own ?jit= wins.
	if _, set := cfg.ConnConfig.RuntimeParams["jit"]; !set {
		cfg.ConnConfig.RuntimeParams["jit"] = "off"
	}
	pgxPool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("cannot reach Postgres at %s: %w", where, err)
	}
	pool := &waitingPool{Pool: pgxPool, where: where}
	pool.log.Store(slog.Default())
	// The timeout bounds a silent server, each try; a full one answers,
	// and is waited for as long as ctx lets.
	silent := false
	err = pool.whileFull(ctx, func() error {
		pctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		err := pgxPool.Ping(pctx)
		silent = err != nil && (pctx.Err() != nil || timedOut(err)) && ctx.Err() == nil
		return err
	})
	if err != nil {
		pool.Close()
		switch {
		case serverFull(err):
			return nil, fmt.Errorf("cannot use Postgres at %s: it had no free connection slot (too many clients) until %v: %w", where, context.Cause(ctx), unwrapConnect(err))
		case silent:
			// A server that accepts nothing or never answers: say so,
			// rather than only "context deadline exceeded". pgx's own
			// connect timeout (the same timeout) may fire just before
			// the ping's deadline: that is no answer too.
			return nil, fmt.Errorf("cannot reach Postgres at %s: no answer within %s: %w", where, timeout, unwrapConnect(err))
		}
		return nil, fmt.Errorf("cannot reach Postgres at %s: %w", where, unwrapConnect(err))
	}
	return &Store{
		pool: pool, where: where,
		// A URL that asks for statements without a server-side cache
		// (default_query_exec_mode=cache_describe, say) goes through a
		// transaction pooler: see ListenPolicies.
		pooled: cfg.ConnConfig.DefaultQueryExecMode != pgx.QueryExecModeCacheStatement,
		stats:  tableStats{table: "frontier", after: analyzeAfter},
	}, nil
}

// Where describes a server as host:port/database, with no password.
func Where(c pgconn.Config) string {
	return fmt.Sprintf("%s:%d/%s (user %s)", c.Host, c.Port, c.Database, c.User)
}

// Where describes the server this store talks to.
func (s *Store) Where() string { return s.where }

// Pool exposes the pool for tests and tools that read the tables directly.
// Its calls fail on a full server, where the store's own wait for a slot
// (see waitingPool).
func (s *Store) Pool() *pgxpool.Pool {
	if w, ok := s.pool.(*waitingPool); ok {
		return w.Pool
	}
	return s.pool.(*pgxpool.Pool)
}

// SetLogger sets where the store says it waits for a full server
// (slog.Default() until then): a node's logger, which names the node.
func (s *Store) SetLogger(log *slog.Logger) {
	if w, ok := s.pool.(*waitingPool); ok {
		w.log.Store(log)
	}
}

// Close releases all connections.
func (s *Store) Close() { s.pool.Close() }

// timedOut says whether err is a timeout: a deadline passed, or the
// network gave up waiting.
func timedOut(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

func unwrapConnect(err error) error {
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) && ce.Unwrap() != nil {
		return ce.Unwrap()
	}
	return err
}

// migrationLock serialises migrators: every node migrates at start.
const migrationLock = 0x5350_4944_4552 // "SPIDER"

// Migrate applies the embedded migrations not yet applied, each in its own
// transaction, and returns how many it applied. Nodes migrating at once
// take turns: each migration's transaction takes migrationLock and looks
// again whether another node applied it meanwhile. The lock is a
// transaction's, not a session's, because through a transaction pooler
// (PgBouncer) a session lock would stay with a server connection that goes
// back to the pool, to be released by nobody.
func (s *Store) Migrate(ctx context.Context, log *slog.Logger) (int, error) {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLock); err != nil {
			return fmt.Errorf("take lock: %w", err)
		}
		_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			version int PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("migrate %s: %w", s.where, err)
	}
	rows, err := s.pool.Query(ctx, `SELECT version FROM schema_migrations`)
	if err != nil {
		return 0, fmt.Errorf("migrate %s: %w", s.where, err)
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return 0, fmt.Errorf("migrate %s: %w", s.where, err)
	}
	applied := map[int]bool{}
	for _, v := range versions {
		applied[v] = true
	}
	files, err := fs.Glob(schema.Migrations, "migrations/*.sql")
	if err != nil {
		return 0, err
	}
	slices.Sort(files)
	n := 0
	for _, f := range files {
		name := strings.TrimPrefix(f, "migrations/")
		num, _, ok := strings.Cut(name, "_")
		version, err := strconv.Atoi(num)
		if !ok || err != nil {
			return n, fmt.Errorf("migration %s: name must be NNNN_name.sql", name)
		}
		if applied[version] {
			continue
		}
		sql, err := fs.ReadFile(schema.Migrations, f)
		if err != nil {
			return n, err
		}
		ran, err := s.migrateOne(ctx, version, name, string(sql))
		if err != nil {
			return n, fmt.Errorf("migration %s on %s: %w", name, s.where, err)
		}
		if ran {
			log.Info("applied migration", "migration", name)
			n++
		}
	}
	return n, nil
}

// migrateOne applies one migration in a transaction holding
// migrationLock, unless another node applied it first; ran says whether
// this call did.
func (s *Store) migrateOne(ctx context.Context, version int, name, sql string) (ran bool, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLock); err != nil {
			return fmt.Errorf("take lock: %w", err)
		}
		var done bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = $1)`, version).Scan(&done); err != nil {
			return err
		}
		if done {
			return nil
		}
		if _, err := tx.Exec(ctx, sql); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, version, name)
		ran = err == nil
		return err
	})
	return ran && err == nil, err
}

// retryTx runs fn in a transaction, retrying on serialization failures and
// deadlocks, which concurrent batches can meet on shared rows.
func (s *Store) retryTx(ctx context.Context, fn func(pgx.Tx) error) error {
	return s.retry(ctx, func() error { return pgx.BeginFunc(ctx, s.pool, fn) })
}

// retry runs fn (statements that are each atomic, or a transaction) again
// on serialization failures and deadlocks, five times at most, pausing
// 10 ms doubling to 40 ms in between.
func (s *Store) retry(ctx context.Context, fn func() error) error {
	wait := retry.Backoff(10*time.Millisecond, 40*time.Millisecond)
	for attempt := 1; ; attempt++ {
		err := fn()
		var pe *pgconn.PgError
		if err == nil || !errors.As(err, &pe) || (pe.Code != "40001" && pe.Code != "40P01") || attempt == 5 {
			return err
		}
		if !retry.Sleep(ctx.Done(), wait) {
			return ctx.Err()
		}
	}
}

// Connect opens the database of cfg, saying in any error where its URL came
// from (flag, environment or default).
func Connect(ctx context.Context, cfg config.Config) (*Store, error) {
	s, err := Open(ctx, cfg.DatabaseURL, int32(cfg.Node.DBConns), cfg.ConnectTimeout)
	if err != nil {
		return nil, fmt.Errorf("%w (database URL from %s)", err, cfg.From.DatabaseURL)
	}
	return s, nil
}

// dbPool is what the store calls on its pool: pgxpool's methods, which
// waitingPool has too. An interface, so that a store can also sit on a
// plain pgxpool (OpenExplained does, for the scale tests).
type dbPool interface {
	Acquire(ctx context.Context) (*pgxpool.Conn, error)
	AcquireFunc(ctx context.Context, f func(*pgxpool.Conn) error) error
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	Begin(ctx context.Context) (pgx.Tx, error)
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
	CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error)
	Ping(ctx context.Context) error
	Stat() *pgxpool.Stat
	Close()
}

// waitingPool is the store's pgxpool, but a call that needs a new
// connection on a server with no free connection slot waits for one,
// saying so, rather than failing: a cluster with more node connections
// than the server's max_connections (or PgBouncer's max_client_conn) slows
// down instead of failing work. pgxpool has no hook around making a
// connection (a DialFunc sees the TCP connection, not the server's
// refusal, which comes after the startup message), so the store's calls
// wait here, one method each; their signatures are pgxpool's, and a
// refused connection is a ConnectError, so nothing of the call had run.
type waitingPool struct {
	*pgxpool.Pool
	where  string
	log    atomic.Pointer[slog.Logger]
	warned atomic.Int64 // when it last said it waits, in Unix nanoseconds
}

// serverFull says whether err is a server's refusal of a new connection
// because it has as many as it takes: Postgres's too_many_connections
// (also its slots reserved for superusers), or PgBouncer's
// max_client_conn, which has no SQLSTATE of its own.
func serverFull(err error) bool {
	var ce *pgconn.ConnectError
	var pe *pgconn.PgError
	if !errors.As(err, &ce) || !errors.As(err, &pe) {
		return false
	}
	return pe.Code == "53300" || (pe.Code == "08P01" && strings.HasPrefix(pe.Message, "no more connections allowed"))
}

// whileFull runs try until it does not fail on a full server, pausing in
// between (50 ms doubling to 2 s, jittered, so that many waiting nodes do
// not come back at once), until ctx ends.
func (p *waitingPool) whileFull(ctx context.Context, try func() error) error {
	wait := retry.Backoff(50*time.Millisecond, 2*time.Second)
	for {
		err := try()
		if !serverFull(err) {
			return err
		}
		p.warn(err)
		if !retry.Sleep(ctx.Done(), wait) {
			return fmt.Errorf("%w (waited for a free connection slot until %v)", err, context.Cause(ctx))
		}
	}
}

// warn says once a minute at most that calls wait for a full server.
func (p *waitingPool) warn(err error) {
	now := time.Now().UnixNano()
	last := p.warned.Load()
	if now-last < int64(time.Minute) || !p.warned.CompareAndSwap(last, now) {
		return
	}
	var pe *pgconn.PgError
	errors.As(err, &pe)
	p.log.Load().Warn("Postgres at "+p.where+" has no free connection slots (too many clients); waiting",
		"server_said", pe.Message, "sqlstate", pe.Code)
}

func (p *waitingPool) Acquire(ctx context.Context) (c *pgxpool.Conn, err error) {
	err = p.whileFull(ctx, func() error { c, err = p.Pool.Acquire(ctx); return err })
	return c, err
}

func (p *waitingPool) AcquireFunc(ctx context.Context, f func(*pgxpool.Conn) error) error {
	c, err := p.Acquire(ctx)
	if err != nil {
		return err
	}
	defer c.Release()
	return f(c)
}

func (p *waitingPool) Exec(ctx context.Context, sql string, args ...any) (tag pgconn.CommandTag, err error) {
	err = p.whileFull(ctx, func() error { tag, err = p.Pool.Exec(ctx, sql, args...); return err })
	return tag, err
}

func (p *waitingPool) Query(ctx context.Context, sql string, args ...any) (rows pgx.Rows, err error) {
	err = p.whileFull(ctx, func() error { rows, err = p.Pool.Query(ctx, sql, args...); return err })
	return rows, err
}

// QueryRow sends the query at once, as pgxpool does; a full server shows
// in Scan, which waits and sends it again.
func (p *waitingPool) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return &waitingRow{p: p, ctx: ctx, sql: sql, args: args, row: p.Pool.QueryRow(ctx, sql, args...)}
}

type waitingRow struct {
	p    *waitingPool
	ctx  context.Context
	sql  string
	args []any
	row  pgx.Row
}

func (r *waitingRow) Scan(dest ...any) error {
	row := r.row
	return r.p.whileFull(r.ctx, func() error {
		if row == nil {
			row = r.p.Pool.QueryRow(r.ctx, r.sql, r.args...)
		}
		err := row.Scan(dest...)
		row = nil
		return err
	})
}

// SendBatch sends b on a connection Acquire waited for. The connection
// goes back when the results are closed or, for a batch that began a
// transaction (pgx.Batch.BeginTx), when the transaction ends.
func (p *waitingPool) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	c, err := p.Acquire(ctx)
	if err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	br := c.SendBatch(ctx, b)
	if tx := br.Tx(); tx != nil {
		return &releasingBatch{BatchResults: br, tx: &releasingTx{Tx: tx, c: c}}
	}
	return &releasingBatch{BatchResults: br, c: c}
}

type releasingBatch struct {
	pgx.BatchResults
	c  *pgxpool.Conn // nil when tx owns it
	tx *releasingTx
}

func (b *releasingBatch) Close() error {
	err := b.BatchResults.Close()
	if b.c != nil {
		b.c.Release()
		b.c = nil
	}
	return err
}

func (b *releasingBatch) Tx() pgx.Tx {
	if b.tx == nil {
		return nil
	}
	return b.tx
}

// releasingTx releases its connection when it ends, as pgxpool.Tx does.
type releasingTx struct {
	pgx.Tx
	c *pgxpool.Conn
}

func (t *releasingTx) Commit(ctx context.Context) error {
	err := t.Tx.Commit(ctx)
	t.release()
	return err
}

func (t *releasingTx) Rollback(ctx context.Context) error {
	err := t.Tx.Rollback(ctx)
	t.release()
	return err
}

func (t *releasingTx) release() {
	if t.c != nil {
		t.c.Release()
		t.c = nil
	}
}

func (p *waitingPool) Begin(ctx context.Context) (pgx.Tx, error) {
	return p.BeginTx(ctx, pgx.TxOptions{})
}

func (p *waitingPool) BeginTx(ctx context.Context, opts pgx.TxOptions) (tx pgx.Tx, err error) {
	err = p.whileFull(ctx, func() error { tx, err = p.Pool.BeginTx(ctx, opts); return err })
	return tx, err
}

func (p *waitingPool) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (n int64, err error) {
	err = p.whileFull(ctx, func() error { n, err = p.Pool.CopyFrom(ctx, table, columns, src); return err })
	return n, err
}

func (p *waitingPool) Ping(ctx context.Context) error {
	return p.whileFull(ctx, func() error { return p.Pool.Ping(ctx) })
}
