package store

import (
	"context"
	"sync"
	"time"
)

// tableStats counts the rows this process added to a table (the
// frontier) since it last analyzed it.
//
// Autovacuum analyzes a table at most once per autovacuum_naptime (a
// minute by default), and a campaign's frontier grows from nothing to
// hundreds of thousands of rows in that minute. Planned on no statistics,
// the id-driven updates (claim, outcomes) guess that a campaign has a
// handful of leased rows and scan all of them for each commit instead of
// looking up the ids: measured on `make bench`, the outcome update spent
// 207 of its 282 ms in that scan. So the store analyzes the frontier
// itself while it grows fast, and leaves it to autovacuum once the growth
// is small beside what is there.
type tableStats struct {
	table   string // a constant: it is put in the ANALYZE statement
	after   int64  // the least number of new rows worth an analyze
	mu      sync.Mutex
	added   int64 // rows added since the last analyze
	known   int64 // rows the last analyze saw (pg_class.reltuples)
	running bool
}

const (
	// analyzeAfter is the least number of new rows worth an analyze, and
	// analyzeGrowth the growth, as a fraction of the rows already there.
	analyzeAfter  = 20_000
	analyzeGrowth = 0.5
	// analyzeTimeout bounds one analyze (it samples a fixed number of
	// rows, so it takes about as long at 10M rows as at 100k).
	analyzeTimeout = time.Minute
)

// analyzeAsItGrows notes n new frontier rows (see grew).
func (s *Store) analyzeAsItGrows(n int) { s.grew(&s.stats, n) }

// grew notes n new rows of a table and, once they are many beside the
// rows the last analyze saw, analyzes it in the background: one analyze
// at a time per table and process, never on the caller's time.
func (s *Store) grew(st *tableStats, n int) {
	st.mu.Lock()
	st.added += int64(n)
	due := !st.running && st.added >= st.after && float64(st.added) >= analyzeGrowth*float64(st.known)
	if due {
		st.running, st.added = true, 0
	}
	st.mu.Unlock()
	if !due {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), analyzeTimeout)
		defer cancel()
		var known float64
		// A failed analyze costs only a plan: the next growth tries again.
		if _, err := s.pool.Exec(ctx, `ANALYZE `+st.table); err == nil {
			_ = s.pool.QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE oid = $1::regclass`, st.table).Scan(&known)
		}
		st.mu.Lock()
		st.running = false
		if known > 0 {
			st.known = int64(known)
		}
		st.mu.Unlock()
	}()
}
