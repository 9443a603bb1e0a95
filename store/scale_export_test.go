package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// OpenExplained opens a store of one connection whose every statement
// hands its plan, with actual rows, to onPlan (auto_explain, as JSON): the
// scale tests measure the store's own statements, not copies of them.
// Sequential scans are off, as the planner has them at millions of rows:
// on a small test table it would rather read everything. It needs a
// superuser (auto_explain is loaded at connection start).
func OpenExplained(ctx context.Context, url string, onPlan func(json string)) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database URL is not valid: %w", err)
	}
	cfg.MaxConns = 1
	for k, v := range map[string]string{
		"session_preload_libraries":     "auto_explain",
		"auto_explain.log_min_duration": "0",
		"auto_explain.log_analyze":      "on",
		"auto_explain.log_timing":       "off",
		"auto_explain.log_format":       "json",
		"auto_explain.log_level":        "notice",
		"client_min_messages":           "notice",
		"enable_seqscan":                "off",
		"jit":                           "off", // seqscan's cost of "off" would make every plan worth compiling
	} {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	cfg.ConnConfig.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		if _, plan, ok := strings.Cut(n.Message, "plan:\n"); ok && strings.HasPrefix(n.Message, "duration:") {
			onPlan(plan)
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect with auto_explain loaded (a superuser may): %w", err)
	}
	return &Store{pool: pool, where: Where(cfg.ConnConfig.Config)}, nil
}
