package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"
)

// BENCH_PG_STATS=1 makes `bench scale` print, after each crawl, the
// statements Postgres spent most time on (pg_stat_statements), the
// frontier's updates and how many were HOT, and the WAL written: where to
// look first when the nodes wait on Postgres.
const envStatementStats = "BENCH_PG_STATS"

func statementStatsSettings() []string {
	// BENCH_PG_SETTINGS: an experiment's server settings, name=value each,
	// separated by commas or spaces.
	out := strings.FieldsFunc(os.Getenv("BENCH_PG_SETTINGS"), func(r rune) bool { return r == ',' || r == ' ' })
	if os.Getenv(envStatementStats) == "" {
		return out
	}
	return append(out, "shared_preload_libraries=pg_stat_statements")
}

// resetStatementStats forgets the statements so far, under BENCH_PG_STATS,
// so the next printStatementStats shows one run's.
func resetStatementStats(st *stack) {
	if os.Getenv(envStatementStats) == "" {
		return
	}
	ctx := context.Background()
	c, err := pgx.Connect(ctx, st.pg.URL("postgres"))
	if err != nil {
		return
	}
	defer c.Close(ctx)
	c.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
	c.Exec(ctx, "SELECT pg_stat_statements_reset()")
}

func printStatementStats(st *stack) {
	if os.Getenv(envStatementStats) == "" {
		return
	}
	if err := statementStats(st); err != nil {
		fmt.Fprintln(os.Stderr, "bench: statement statistics:", err)
	}
}

// statementStats prints the statements Postgres spent most time on and
// those it compiled with JIT, the run database's writes by table, and the
// frontier's updates with the WAL written; then it starts the statements
// and WAL counts afresh.
func statementStats(st *stack) error {
	ctx := context.Background()
	c, err := pgx.Connect(ctx, st.pg.URL("postgres"))
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		return err
	}
	if err := printTopStatements(ctx, c); err != nil {
		return err
	}
	if err := printJITCompiles(ctx, c); err != nil {
		return err
	}
	db, err := pgx.Connect(ctx, st.pg.URL(fmt.Sprintf("bench_%d", st.runs)))
	if err != nil {
		return err
	}
	defer db.Close(ctx)
	var ins, upd, hot int64
	if err := db.QueryRow(ctx, `SELECT n_tup_ins, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'frontier'`).
		Scan(&ins, &upd, &hot); err != nil {
		return err
	}
	if err := printTableWrites(ctx, db); err != nil {
		return err
	}
	var wal string
	var walFull int64 // times a backend found the WAL buffers full and wrote them itself
	if err := c.QueryRow(ctx, `SELECT pg_size_pretty(wal_bytes), wal_buffers_full FROM pg_stat_wal`).Scan(&wal, &walFull); err != nil {
		return err
	}
	fmt.Printf("frontier: %d rows inserted, %d updates (%d HOT); WAL %s, WAL buffers full %d times\n", ins, upd, hot, wal, walFull)
	_, err = c.Exec(ctx, "SELECT pg_stat_statements_reset(), pg_stat_reset_shared('wal')")
	return err
}

// printTopStatements prints the 30 statements of most execution time.
func printTopStatements(ctx context.Context, c *pgx.Conn) error {
	rows, err := c.Query(ctx, `
		SELECT calls, round(total_exec_time)::bigint, rows, left(regexp_replace(query, '\s+', ' ', 'g'), 110)
		FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 30`)
	if err != nil {
		return err
	}
	var (
		calls, ms, n int64
		q            string
	)
	_, err = pgx.ForEachRow(rows, []any{&calls, &ms, &n, &q}, func() error {
		fmt.Printf("%7d calls %8d ms %9d rows  %s\n", calls, ms, n, q)
		return nil
	})
	return err
}

// printJITCompiles prints the statements the server compiled with JIT,
// each time it ran them: a compile costs tens of milliseconds of CPU.
func printJITCompiles(ctx context.Context, c *pgx.Conn) error {
	jit, err := c.Query(ctx, `
		SELECT calls, jit_functions, round(jit_generation_time + jit_inlining_time + jit_optimization_time + jit_emission_time)::bigint,
		       left(regexp_replace(query, '\s+', ' ', 'g'), 110)
		FROM pg_stat_statements WHERE jit_functions > 0
		ORDER BY jit_generation_time + jit_inlining_time + jit_optimization_time + jit_emission_time DESC LIMIT 5`)
	if err != nil {
		return err
	}
	var (
		calls, fns, ms int64
		q              string
	)
	_, err = pgx.ForEachRow(jit, []any{&calls, &fns, &ms, &q}, func() error {
		fmt.Printf("  JIT: %5d calls compiled %6d functions in %6d ms  %s\n", calls, fns, ms, q)
		return nil
	})
	return err
}

// printTableWrites prints each written table's rows inserted, updated and
// deleted, its autovacuums, and how it was read.
func printTableWrites(ctx context.Context, db *pgx.Conn) error {
	tables, err := db.Query(ctx, `
		SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del, autovacuum_count, autoanalyze_count,
		       seq_scan, seq_tup_read, coalesce(idx_tup_fetch, 0)
		FROM pg_stat_user_tables WHERE n_tup_ins + n_tup_upd + n_tup_del > 0 ORDER BY n_tup_ins + n_tup_upd + n_tup_del DESC`)
	if err != nil {
		return err
	}
	var (
		rel                    string
		tIns, tUpd, tHot, tDel int64
		vacuums, analyzes      int64
		seqs, seqRead, idxRead int64
	)
	_, err = pgx.ForEachRow(tables, []any{&rel, &tIns, &tUpd, &tHot, &tDel, &vacuums, &analyzes, &seqs, &seqRead, &idxRead}, func() error {
		fmt.Printf("  %-18s %7d inserted %7d updated (%d HOT) %7d deleted; autovacuum %d, autoanalyze %d; %d seq scans reading %d rows, %d rows by index\n",
			rel, tIns, tUpd, tHot, tDel, vacuums, analyzes, seqs, seqRead, idxRead)
		return nil
	})
	return err
}
