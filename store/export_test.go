package store

import "context"

// LeaseUnderWay runs a lease as LeaseDeliveries does, and leaves its
// transaction open: it ends at end (true commits), so a test can hold a
// lease under way while something else runs.
func (s *Store) LeaseUnderWay(ctx context.Context, l Lease, max int) (ids []int64, end func(commit bool) error, err error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, nil, err
	}
	end = func(commit bool) error {
		if commit {
			return tx.Commit(ctx)
		}
		return tx.Rollback(ctx)
	}
	b, err := leaseOrReclaim(ctx, tx, l, max)
	if err != nil {
		_ = tx.Rollback(ctx)
		return nil, nil, err
	}
	return b.ids, end, nil
}

// WaitsForLock says whether a session of the store's database waits for
// a lock.
func (s *Store) WaitsForLock(ctx context.Context) (bool, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&n)
	return n > 0, err
}
