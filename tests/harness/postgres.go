// Package harness starts what spiderpool's tests run against, for real: a
// private Postgres cluster, the Temporal dev server, node workers and the
// synthetic web. Nothing here is a mock.
package harness

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/spiderpool/spiderpool/config"
	"github.com/spiderpool/spiderpool/devstack"
	"github.com/spiderpool/spiderpool/store"
)

var discard = slog.New(slog.DiscardHandler)

var (
	pgOnce    sync.Once
	pgCluster *devstack.Postgres
	pgErr     error
	dbSeq     atomic.Int64
	cleanups  []func()
	cleanupMu sync.Mutex
)

// Main runs the package's tests and then stops whatever the harness
// started. Use it as TestMain: func TestMain(m *testing.M) { harness.Main(m) }.
func Main(m *testing.M) {
	// Nodes started by a test serve bodies (--bodies-addr) only to
	// processors with the node secret: one per test binary, in the
	// environment, where nodes, processes and processors all read it.
	if os.Getenv(config.EnvNodeSecret) == "" {
		os.Setenv(config.EnvNodeSecret, config.NewSecret())
	}
	code := m.Run()
	cleanupMu.Lock()
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
	cleanupMu.Unlock()
	os.Exit(code)
}

func atExit(f func()) {
	cleanupMu.Lock()
	defer cleanupMu.Unlock()
	cleanups = append(cleanups, f)
}

// adminURL is a database URL with superuser rights to create databases:
// DATABASE_URL when set, else a private cluster started once per test
// binary.
func adminURL() (string, error) {
	if u := os.Getenv("DATABASE_URL"); u != "" {
		return u, nil
	}
	pgOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		pgCluster, pgErr = devstack.StartPostgres(ctx, devstack.PostgresOptions{})
		if pgErr == nil {
			atExit(func() { _ = pgCluster.Stop() })
		}
	})
	if pgErr != nil {
		return "", pgErr
	}
	return pgCluster.URL("postgres"), nil
}

// Cluster returns the private cluster, starting it if needed; nil when
// DATABASE_URL points elsewhere.
func Cluster(t testing.TB) *devstack.Postgres {
	t.Helper()
	if _, err := adminURL(); err != nil {
		t.Fatalf("postgres: %v", err)
	}
	return pgCluster
}

// testStatementTimeout bounds each query a test makes itself (in
// milliseconds, as Postgres takes it): generous, but a bound.
const testStatementTimeout = "120000"

// NewDatabase creates an empty database for one test, migrated, and returns
// its URL. It is dropped when the test ends.
func NewDatabase(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := adminURL()
	if err != nil {
		t.Fatalf("postgres: %v", err)
	}
	name := fmt.Sprintf("sp_%d_%d_%s", os.Getpid(), dbSeq.Add(1), sanitize(t.Name()))
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("connect to %s: %v", admin, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	url := withDatabase(admin, name)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c, err := pgx.Connect(ctx, admin)
		if err != nil {
			return
		}
		defer c.Close(ctx)
		_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	})
	s, err := store.Open(ctx, url, 4, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Migrate(ctx, discard); err != nil {
		t.Fatal(err)
	}
	return url
}

// OpenStore opens a fresh, migrated database as a Store closed at the end
// of the test.
func OpenStore(t testing.TB) *store.Store {
	t.Helper()
	s, err := store.Open(context.Background(), NewDatabase(t), 20, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func sanitize(name string) string {
	var b strings.Builder
	for _, c := range strings.ToLower(name) {
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
			b.WriteRune(c)
		} else {
			b.WriteByte('_')
		}
	}
	s := b.String()
	if len(s) > 30 {
		s = s[:30]
	}
	return s
}

// WithParam adds a run-time parameter to a postgres:// URL; pgx sends
// parameters it does not know itself to the server at connect.
func WithParam(url, name, value string) string {
	if strings.Contains(url, "?") {
		return url + "&" + name + "=" + value
	}
	return url + "?" + name + "=" + value
}

// withDatabase swaps the database name in a postgres:// URL.
func withDatabase(url, to string) string {
	base, query, _ := strings.Cut(url, "?")
	if i := strings.LastIndex(base, "/"); i > len("postgres://") {
		base = base[:i]
	}
	if query != "" {
		return base + "/" + to + "?" + query
	}
	return base + "/" + to
}
