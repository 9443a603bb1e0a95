package store

import (
	"context"
	"fmt"
)

// ProcessorCounts is where one processor's pages stand.
type ProcessorCounts struct {
	Pending   int64 `json:"pending"`
	Leased    int64 `json:"in_flight"`
	Processed int64 `json:"processed"`
	Failed    int64 `json:"failed"`
	Items     int64 `json:"items"`
	// LastError is the error of a failed page, the latest.
	LastError string `json:"last_error,omitempty"`
}

// ProcessorStatus counts each processor's deliveries of a campaign.
func (s *Store) ProcessorStatus(ctx context.Context, campaignKey int64) (map[string]ProcessorCounts, error) {
	// Pages in chunks still to take count as pending, pages held by
	// batches as leased, the done pages of batches stored as done (see
	// recordBatch), and each failed page has a deliveries row.
	rows, err := s.pool.Query(ctx, `
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
			return nil, err
		}
		c := out[name]
		switch state {
		case DeliveryPending:
			c.Pending += n
		case DeliveryLeased:
			c.Leased += n
		case DeliveryDone:
			c.Processed += n
			c.Items += items
		case DeliveryFailed:
			c.Failed += n
			if lastErr != nil {
				c.LastError = *lastErr
			}
		}
		out[name] = c
	}
	return out, rows.Err()
}
