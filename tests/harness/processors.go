package harness

import (
	"context"
	"fmt"

	"github.com/spiderpool/spiderpool/store"
)

// ProcessorCounts is where one processor's pages of a campaign stand in
// Postgres.
type ProcessorCounts struct {
	Pending   int64
	Leased    int64
	Processed int64
	Failed    int64
	Items     int64
	// LastError is the error of a failed page, the latest.
	LastError string
}

// ProcessorStatus counts each processor's pages of a campaign as the store
// keeps them (see store/deliveries.go): pages in chunks still to take are
// pending, pages held by batches leased, the done pages of batches
// processed, and each failed page has a deliveries row. Tests check
// delivery against it; the product reads the workflow's own counters.
func ProcessorStatus(ctx context.Context, s *store.Store, campaignKey int64) (map[string]ProcessorCounts, error) {
	rows, err := s.Pool().Query(ctx, `
		SELECT processor, 'failed', count(*), 0,
		       (array_agg(error ORDER BY done_at DESC) FILTER (WHERE error IS NOT NULL))[1]
		FROM deliveries WHERE campaign = $1 AND state = 'failed' GROUP BY processor
		UNION ALL
		SELECT processor, 'pending', sum(cardinality(ids)), 0, NULL
		FROM chunk_deliveries WHERE campaign = $1 GROUP BY processor
		UNION ALL
		SELECT processor, 'leased', sum(cardinality(ids)), 0, NULL
		FROM delivery_batches WHERE campaign = $1 AND ids IS NOT NULL GROUP BY processor
		UNION ALL
		SELECT processor, 'done', sum(pages), sum(items), NULL FROM processed_batches WHERE campaign = $1 GROUP BY processor`, campaignKey)
	if err != nil {
		return nil, fmt.Errorf("processor status of campaign %d: %w", campaignKey, err)
	}
	defer rows.Close()
	out := map[string]ProcessorCounts{}
	for rows.Next() {
		var (
			name, state string
			n, items    int64
			lastErr     *string
		)
		if err := rows.Scan(&name, &state, &n, &items, &lastErr); err != nil {
			return nil, fmt.Errorf("processor status of campaign %d: %w", campaignKey, err)
		}
		c := out[name]
		switch state {
		case "pending":
			c.Pending += n
		case "leased":
			c.Leased += n
		case "done":
			c.Processed += n
			c.Items += items
		case "failed":
			c.Failed += n
			if lastErr != nil {
				c.LastError = *lastErr
			}
		}
		out[name] = c
	}
	return out, rows.Err()
}
