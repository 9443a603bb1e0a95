package workers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestMigrationBesideRunningNodesIsRetried: a migration that Postgres made
// a deadlock's victim (running nodes of the previous release held the
// tables it alters) is run again, and the node starts; other errors end
// the start at once.
func TestMigrationBesideRunningNodesIsRetried(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	deadlock := fmt.Errorf("migration 0003_x.sql on db: %w", &pgconn.PgError{Code: deadlockDetected, Message: "deadlock detected"})
	calls := 0
	err := migrateRetrying(context.Background(), func(context.Context) error {
		calls++
		if calls < 3 {
			return deadlock
		}
		return nil
	}, 0, log)
	if err != nil || calls != 3 {
		t.Fatalf("after two deadlocks: err %v after %d attempts, want success on the third", err, calls)
	}

	calls = 0
	syntax := &pgconn.PgError{Code: "42601", Message: "syntax error"}
	err = migrateRetrying(context.Background(), func(context.Context) error { calls++; return syntax }, 0, log)
	if !errors.Is(err, syntax) || calls != 1 {
		t.Fatalf("a broken migration: err %v after %d attempts, want it at once", err, calls)
	}

	calls = 0
	err = migrateRetrying(context.Background(), func(context.Context) error { calls++; return deadlock }, 0, log)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != deadlockDetected || calls != 10 {
		t.Fatalf("deadlocks every time: err %v after %d attempts, want the deadlock after 10", err, calls)
	}
}
