package devstack_test

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/spiderpool/spiderpool/devstack"
	"github.com/spiderpool/spiderpool/schema"
	"github.com/spiderpool/spiderpool/store"
)

// needPgBouncer skips the test when pgbouncer is not installed, unless
// SPIDERPOOL_REQUIRE_PGBOUNCER says it must be (make test installs it).
func needPgBouncer(t *testing.T) {
	t.Helper()
	if _, err := devstack.FindPgBouncer(); err != nil {
		if os.Getenv("SPIDERPOOL_REQUIRE_PGBOUNCER") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
}

// bouncedPostgres starts a throwaway cluster with a database spiderpool,
// and a PgBouncer in front of it.
func bouncedPostgres(ctx context.Context, t *testing.T, opts devstack.PgBouncerOptions) (*devstack.Postgres, *devstack.PgBouncer) {
	t.Helper()
	needPgBouncer(t)
	pg, err := devstack.StartPostgres(ctx, devstack.PostgresOptions{MaxConnections: 100})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Stop() })
	if _, err := pg.CreateDatabase(ctx, "spiderpool"); err != nil {
		t.Fatal(err)
	}
	opts.Upstream = devstack.Upstream{Host: "127.0.0.1", Port: pg.Port(), Database: "spiderpool", User: devstack.PostgresUser}
	b, err := devstack.StartPgBouncer(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Stop() })
	return pg, b
}

// TestStoreWorksThroughPgBouncer: through PgBouncer in transaction mode,
// two nodes migrate at once (each migration applied once), the store's
// statements, a batch and a COPY work, JIT is off as store.Open asks, and
// 100 busy client connections share PoolSize server connections.
func TestStoreWorksThroughPgBouncer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const poolSize = 8
	pg, b := bouncedPostgres(ctx, t, devstack.PgBouncerOptions{PoolSize: poolSize})
	url := b.URL("spiderpool")

	migrations, err := fs.Glob(schema.Migrations, "migrations/*.sql")
	if err != nil || len(migrations) == 0 {
		t.Fatalf("embedded migrations: %v %v", migrations, err)
	}
	applied := make([]int, 2)
	var g errgroup.Group
	stores := make([]*store.Store, 2)
	for i := range stores {
		s, err := store.Open(ctx, url, 4, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		stores[i] = s
		g.Go(func() (err error) {
			applied[i], err = s.Migrate(ctx, slog.New(slog.DiscardHandler))
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatalf("two nodes migrating at once through PgBouncer: %v", err)
	}
	if applied[0]+applied[1] != len(migrations) {
		t.Errorf("the two nodes applied %d and %d migrations, want %d between them", applied[0], applied[1], len(migrations))
	}
	db := stores[0].Pool()
	var recorded int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM schema_migrations`).Scan(&recorded); err != nil || recorded != len(migrations) {
		t.Errorf("schema_migrations holds %d rows (%v), want %d", recorded, err, len(migrations))
	}

	var jit string
	if err := db.QueryRow(ctx, `SHOW jit`).Scan(&jit); err != nil || jit != "off" {
		t.Errorf("jit through PgBouncer = %q (%v), want off", jit, err)
	}
	// The same statement on several server connections: a named prepared
	// statement would be missing on all but one.
	for i := range 3 * poolSize {
		var n int
		if err := db.QueryRow(ctx, `SELECT $1::int + 1`, i).Scan(&n); err != nil || n != i+1 {
			t.Fatalf("query %d: %d, %v", i, n, err)
		}
	}
	batch := &pgx.Batch{}
	for i := range 10 {
		batch.Queue(`SELECT $1::int * 2`, i)
	}
	br := db.SendBatch(ctx, batch)
	for i := range 10 {
		var n int
		if err := br.QueryRow().Scan(&n); err != nil || n != 2*i {
			t.Fatalf("batch query %d: %d, %v", i, n, err)
		}
	}
	if err := br.Close(); err != nil {
		t.Fatalf("batch: %v", err)
	}
	if _, err := db.Exec(ctx, `CREATE TABLE bounced_copy (id int, name text)`); err != nil {
		t.Fatal(err)
	}
	rows := [][]any{{1, "a"}, {2, "b"}, {3, "c"}}
	if n, err := db.CopyFrom(ctx, pgx.Identifier{"bounced_copy"}, []string{"id", "name"}, pgx.CopyFromRows(rows)); err != nil || n != 3 {
		t.Fatalf("COPY through PgBouncer: %d rows, %v", n, err)
	}
	if _, err := stores[1].Nodes(ctx, nil); err != nil {
		t.Fatalf("the store's node registry through PgBouncer: %v", err)
	}

	// 100 client connections, each busy in turn; the server sees no more
	// than the pool.
	clients, err := pgxpool.New(ctx, url+"&pool_max_conns=100")
	if err != nil {
		t.Fatal(err)
	}
	defer clients.Close()
	direct, err := pgx.Connect(ctx, pg.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close(ctx)
	peak, err := peakServerConnections(ctx, direct, "spiderpool", func() error {
		var g errgroup.Group
		var ready sync.WaitGroup
		ready.Add(100)
		start := make(chan struct{})
		for range 100 {
			g.Go(func() error {
				c, err := clients.Acquire(ctx)
				ready.Done()
				if err != nil {
					return err
				}
				defer c.Release()
				<-start // all 100 client connections open before any query
				for range 3 {
					if _, err := c.Exec(ctx, `SELECT pg_sleep(0.05)`); err != nil {
						return err
					}
				}
				return nil
			})
		}
		ready.Wait()
		close(start)
		return g.Wait()
	})
	if err != nil {
		t.Fatalf("100 busy clients through PgBouncer: %v", err)
	}
	if got := clients.Stat().TotalConns(); got != 100 {
		t.Errorf("%d client connections, want 100", got)
	}
	if peak == 0 || peak > poolSize {
		t.Errorf("the server had up to %d connections to the database with 100 busy clients, want 1 to %d (the pool)", peak, poolSize)
	}
	t.Logf("100 busy clients through PgBouncer: at most %d server connections (pool %d)", peak, poolSize)
}

// peakServerConnections runs work and returns the most client backends
// connected to db that the server showed meanwhile, sampled on conn.
func peakServerConnections(ctx context.Context, conn *pgx.Conn, db string, work func() error) (int, error) {
	done := make(chan error, 1)
	go func() { done <- work() }()
	peak := 0
	for {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend'`, db).Scan(&n)
		if err != nil {
			return peak, fmt.Errorf("count server connections: %w", err)
		}
		peak = max(peak, n)
		select {
		case err := <-done:
			return peak, err
		case <-ctx.Done():
			return peak, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestStoreWaitsForPgBouncerClientSlot: when PgBouncer has as many clients
// as max_client_conn, a store call that needs a new connection waits for
// one, as it does for a full Postgres.
func TestStoreWaitsForPgBouncerClientSlot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, b := bouncedPostgres(ctx, t, devstack.PgBouncerOptions{MaxClients: 4})
	storeWaitsForASlot(ctx, t, b.URL("spiderpool"), "08P01")
}
