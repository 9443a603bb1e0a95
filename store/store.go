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
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/spiderpool/spiderpool/config"
	"github.com/spiderpool/spiderpool/schema"
)

// Store is a pool of connections to the spiderpool database.
type Store struct {
	pool  *pgxpool.Pool
	where string
	// knownHosts caches (campaign, shard key) pairs that have a hosts row,
	// so inserting links skips the hosts upsert once a host is known.
	knownHosts sync.Map
	// stats keeps the planner's statistics of the frontier up with its
	// growth (see analyzeAsItGrows).
	stats tableStats
	// deliveryStats and bodyStats do the same for deliveries and
	// page_bodies, and bodyStats vacuums page_bodies.
	deliveryStats, bodyStats tableStats
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
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("cannot reach Postgres at %s: %w", where, err)
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		if (pctx.Err() != nil || timedOut(err)) && ctx.Err() == nil {
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
		stats:         tableStats{table: "frontier", after: analyzeAfter},
		deliveryStats: tableStats{table: "deliveries", after: 2_000},
		bodyStats:     tableStats{table: "page_bodies", vacuum: true, after: 2_000},
	}, nil
}

// Where describes a server as host:port/database, with no password.
func Where(c pgconn.Config) string {
	return fmt.Sprintf("%s:%d/%s (user %s)", c.Host, c.Port, c.Database, c.User)
}

// Where describes the server this store talks to.
func (s *Store) Where() string { return s.where }

// Pool exposes the pool for tests and tools that read the tables directly.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

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
// on serialization failures and deadlocks.
func (s *Store) retry(ctx context.Context, fn func() error) error {
	var err error
	for attempt := range 5 {
		err = fn()
		var pe *pgconn.PgError
		if err == nil || !errors.As(err, &pe) || (pe.Code != "40001" && pe.Code != "40P01") {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(attempt+1) * 10 * time.Millisecond):
		}
	}
	return err
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
