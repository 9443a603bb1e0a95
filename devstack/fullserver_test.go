package devstack_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/spiderpool/spiderpool/devstack"
	"github.com/spiderpool/spiderpool/store"
)

// TestStoreWaitsForAFullPostgres: on a server with every connection slot
// taken, a store call that needs a new connection waits, saying so, and
// succeeds once a slot frees, where pgx alone fails with too_many_connections.
func TestStoreWaitsForAFullPostgres(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pg, err := devstack.StartPostgres(ctx, devstack.PostgresOptions{MaxConnections: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Stop() //nolint:errcheck
	url, err := pg.CreateDatabase(ctx, "spiderpool")
	if err != nil {
		t.Fatal(err)
	}
	storeWaitsForASlot(ctx, t, url, "53300")
}

// storeWaitsForASlot opens a store on url, holds its one connection, takes
// every other slot the server has, and checks that a migration through the
// store waits for a slot (the server refusing with sqlstate meanwhile),
// logs that it waits, and succeeds when a slot is given back.
func storeWaitsForASlot(ctx context.Context, t *testing.T, url, sqlstate string) {
	t.Helper()
	s, err := store.Open(ctx, url, 2, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	logged := make(chan slog.Record, 16)
	s.SetLogger(slog.New(recordHandler(logged)))
	// The store's first connection, opened by Open's ping, stays busy: the
	// migration below needs a second one.
	first, err := s.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Release()

	var held []*pgx.Conn
	defer func() {
		for _, c := range held {
			_ = c.Close(context.Background())
		}
	}()
	for {
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != sqlstate {
				t.Fatalf("filling the server after %d connections: %v, want SQLSTATE %s", len(held), err, sqlstate)
			}
			break
		}
		held = append(held, c)
		if len(held) > 100 {
			t.Fatal("the server took 100 connections and is still not full")
		}
	}

	done := make(chan error, 1)
	go func() {
		_, err := s.Migrate(ctx, slog.New(slog.DiscardHandler))
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("the migration on a full server ended without waiting: %v", err)
	case r := <-logged:
		if r.Level != slog.LevelWarn || !strings.Contains(r.Message, "has no free connection slots (too many clients); waiting") {
			t.Fatalf("logged %s %q, want a warning that the store waits for a slot", r.Level, r.Message)
		}
	case <-time.After(time.Minute):
		t.Fatal("the migration on a full server neither ended nor said it waits within a minute")
	}

	if err := held[0].Close(ctx); err != nil {
		t.Fatal(err)
	}
	held = held[1:]
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the migration failed after a slot was given back: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the migration did not end within a minute of a slot being given back")
	}
}

// recordHandler sends every record to ch, dropping those ch has no room for.
type recordHandler chan<- slog.Record

func (h recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h recordHandler) Handle(_ context.Context, r slog.Record) error {
	select {
	case h <- r.Clone():
	default:
	}
	return nil
}
func (h recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h recordHandler) WithGroup(string) slog.Handler      { return h }
