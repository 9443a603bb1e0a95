package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/spiderpool/spiderpool/campaign"
)

// ReleaseDeliveries returns to pending a processor's pages leased by
// runs other than keepRun (see campaign.LeaseRun): such a run has ended,
// and the batch carrying them may never come back. keepRun becomes the
// campaign's live run (see liveRun); a run that has ended (a late reset)
// releases nothing.
func (s *Store) ReleaseDeliveries(ctx context.Context, campaignKey int64, processor string, keepRun int64) (int, error) {
	var n int
	err := s.retryTx(ctx, func(tx pgx.Tx) error {
		live, err := liveRun(ctx, tx, campaignKey, keepRun)
		if err != nil || !live {
			n = 0
			return err
		}
		n, err = releaseOtherRuns(ctx, tx, campaignKey, processor, keepRun, keepRun)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("release deliveries of campaign %d to %s: %w", campaignKey, processor, err)
	}
	return n, nil
}

// keptEndedRuns is how many ended runs processor_runs remembers: a lease
// of a run can come late only by a local activity's timeout (a minute),
// far less than 32 runs; and a new run's hash (31 bits) matches one of
// them by chance once in 67 million.
const keptEndedRuns = 32

// runLockSQL is the key ($1 the campaign key) of a campaign's run lock,
// an advisory lock held to the end of a transaction: shared by a lease,
// exclusive by a reset. A reset waits for the leases under way, and the
// leases after it wait for the reset, in the order they came (a row lock
// FOR SHARE would let new leases pass a waiting reset). The two-key form
// keeps it apart from the migration lock; keys past 2^31 wrap, and two
// campaigns that share a lock only wait for each other's resets. It is a
// statement of its own: a statement reads as of its start, so a read of
// processor_runs in the same statement would miss a reset it waited for.
const runLockSQL = `(2, ($1::bigint % 2147483648)::int)`

// liveRun makes run the campaign's live run in processor_runs, unless it
// has ended, and says whether it is live. It holds the campaign's run
// lock: the leases under way commit first, so the release after it sees
// what they took, and a lease after it sees the run it replaced ended.
func liveRun(ctx context.Context, tx pgx.Tx, campaignKey, run int64) (bool, error) {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock`+runLockSQL, campaignKey); err != nil {
		return false, err
	}
	var live, ended bool
	err := tx.QueryRow(ctx, `SELECT run = $2, $2 = ANY(ended) FROM processor_runs WHERE campaign = $1`,
		campaignKey, run).Scan(&live, &ended)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		_, err = tx.Exec(ctx, `INSERT INTO processor_runs (campaign, run) VALUES ($1, $2)`, campaignKey, run)
		return err == nil, err
	case err != nil || live || ended:
		return live, err
	}
	_, err = tx.Exec(ctx, `
		UPDATE processor_runs SET run = $2,
		       ended = (ended || run)[greatest(cardinality(ended) + 2 - $3, 1):]
		WHERE campaign = $1`, campaignKey, run, keptEndedRuns)
	return err == nil, err
}

// endedRun says whether a lease's run has ended: a later run's reset has
// replaced it (see liveRun); and which run is live (0 if none has reset).
// It takes the campaign's run lock shared, to the end of the lease.
func endedRun(ctx context.Context, tx pgx.Tx, l Lease) (ended bool, live int64, err error) {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock_shared`+runLockSQL, l.CampaignKey); err != nil {
		return false, 0, err
	}
	err = tx.QueryRow(ctx, `SELECT $2 = ANY(ended), run FROM processor_runs WHERE campaign = $1`,
		l.CampaignKey, campaign.LeaseRun(l.ID)).Scan(&ended, &live)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, 0, nil
	}
	return ended, live, err
}

// releaseOtherRuns returns to pending what leases of runs other than
// keepRun and liveRun hold, and says how many pages. The live run's
// batches are in flight, whoever asks: a run that never reset (its lease
// come late) must not take them back.
func releaseOtherRuns(ctx context.Context, tx pgx.Tx, campaignKey int64, processor string, keepRun, liveRun int64) (int, error) {
	return releaseLeases(ctx, tx, campaignKey, processor, `lease >> 32 NOT IN ($3, $4)`, keepRun, liveRun)
}

// ReleaseChildLeases returns to pending what the batches of ProcessBatch
// children that failed or were terminated hold (children names each by
// its first lease: a child's leases share all but their low 8 bits, see
// campaign.DeliveryLeaseRequest.Lease), and says how many pages. Nothing
// else will store those batches.
func (s *Store) ReleaseChildLeases(ctx context.Context, campaignKey int64, processor string, children []int64) (int, error) {
	prefixes := make([]int64, len(children))
	for i, c := range children {
		prefixes[i] = c >> 8
	}
	var n int
	err := s.retryTx(ctx, func(tx pgx.Tx) error {
		var err error
		n, err = releaseLeases(ctx, tx, campaignKey, processor, `lease >> 8 = ANY($3)`, prefixes)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("release the batches of failed children of campaign %d's processor %s: %w", campaignKey, processor, err)
	}
	return n, nil
}

// releaseLeases returns to pending what the batches of the leases that
// which picks ($3 on: args) hold, into their chunks' deliveries (merged
// with what those still have), and says how many pages.
func releaseLeases(ctx context.Context, tx pgx.Tx, campaignKey int64, processor, which string, args ...any) (int, error) {
	var n int
	err := tx.QueryRow(ctx, `
		WITH gone AS (
			DELETE FROM delivery_batches WHERE campaign = $1 AND processor = $2 AND `+which+`
			RETURNING ids, chunks
		), pages AS (
			SELECT p.id, p.chunk FROM gone, unnest(gone.ids, gone.chunks) AS p(id, chunk) WHERE gone.chunks IS NOT NULL
		), chunked AS (
			INSERT INTO chunk_deliveries AS d (campaign, processor, chunk, ids)
			SELECT $1, $2, chunk, array_agg(id ORDER BY id) FROM pages GROUP BY chunk
			ON CONFLICT (campaign, processor, chunk) DO UPDATE
			SET ids = ARRAY(SELECT DISTINCT x FROM unnest(d.ids || excluded.ids) x ORDER BY x)
		)
		SELECT count(*)::int FROM pages`, append([]any{campaignKey, processor}, args...)...).Scan(&n)
	return n, err
}
