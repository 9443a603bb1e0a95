package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/spiderpool/spiderpool/campaign"
)

// ErrNoCampaign is returned for a campaign ID or key with no row.
var ErrNoCampaign = errors.New("no such campaign")

// CreateCampaign inserts the campaign, or finds it when a workflow under
// the same ID runs again, and returns its key and whether it already
// existed. The stored spec is replaced by spec.
func (s *Store) CreateCampaign(ctx context.Context, id string, spec campaign.Spec) (key int64, existed bool, err error) {
	doc, err := json.Marshal(spec)
	if err != nil {
		return 0, false, err
	}
	// Nodes holding the campaign's hosts hear of it at once: its politeness
	// may be the strictest now (see HostPolicies).
	err = s.pool.QueryRow(ctx, `
		WITH c AS (
			INSERT INTO campaigns (id, spec, min_delay_ms, host_concurrency) VALUES ($1, $2, $3, $4)
			ON CONFLICT (id) DO UPDATE SET spec = EXCLUDED.spec, status = 'running', finished_at = NULL,
				min_delay_ms = EXCLUDED.min_delay_ms, host_concurrency = EXCLUDED.host_concurrency
			RETURNING key, xmax <> 0 AS existed
		)
		SELECT key, existed, pg_notify($5, key::text)::text FROM c`,
		id, doc, ms(spec.Politeness.MinDelay.D()), spec.Politeness.MaxConcurrencyPerHost, PolicyChannel).
		Scan(&key, &existed, new(string))
	if err != nil {
		return 0, false, fmt.Errorf("create campaign %s: %w", id, err)
	}
	return key, existed, nil
}

// CampaignSpec loads the stored, normalised spec of a campaign.
func (s *Store) CampaignSpec(ctx context.Context, key int64) (campaign.Spec, error) {
	var doc []byte
	err := s.pool.QueryRow(ctx, `SELECT spec FROM campaigns WHERE key = $1`, key).Scan(&doc)
	if errors.Is(err, pgx.ErrNoRows) {
		return campaign.Spec{}, fmt.Errorf("campaign %d: %w", key, ErrNoCampaign)
	}
	if err != nil {
		return campaign.Spec{}, fmt.Errorf("load spec of campaign %d: %w", key, err)
	}
	// Leniently: a node of a newer version may have stored it, with fields
	// this one does not know.
	spec, err := campaign.DecodeSpec(doc)
	if err != nil {
		return campaign.Spec{}, fmt.Errorf("stored spec of campaign %d: %w", key, err)
	}
	return spec.Normalize()
}

// CampaignKey finds a campaign's key by its ID.
func (s *Store) CampaignKey(ctx context.Context, id string) (int64, error) {
	var key int64
	err := s.pool.QueryRow(ctx, `SELECT key FROM campaigns WHERE id = $1`, id).Scan(&key)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("campaign %s: %w", id, ErrNoCampaign)
	}
	if err != nil {
		return 0, fmt.Errorf("find campaign %s: %w", id, err)
	}
	return key, nil
}

// ExcludePending marks every pending URL excluded with reason: what is left
// when a limit ends the crawl is recorded, not lost.
func (s *Store) ExcludePending(ctx context.Context, key int64, reason string) (int, error) {
	tag, err := s.pool.Exec(ctx, `
		UPDATE frontier SET state = 'excluded', last_error = $2, finished_at = now()
		WHERE campaign = $1 AND state = 'pending'`, key, reason)
	if err != nil {
		return 0, fmt.Errorf("exclude pending URLs of campaign %d: %w", key, err)
	}
	return int(tag.RowsAffected()), nil
}

// Summarize counts the campaign's frontier and pages.
func (s *Store) Summarize(ctx context.Context, key int64) (campaign.Summary, error) {
	return summarize(ctx, s.pool, key)
}

// rowQuerier runs queries: the pool, or a transaction.
type rowQuerier interface {
	querier
	QueryRow(context.Context, string, ...any) pgx.Row
}

func summarize(ctx context.Context, q rowQuerier, key int64) (campaign.Summary, error) {
	var sum campaign.Summary
	var finished *time.Time
	err := q.QueryRow(ctx, `SELECT id, started_at, finished_at FROM campaigns WHERE key = $1`, key).
		Scan(&sum.CampaignID, &sum.StartedAt, &finished)
	if errors.Is(err, pgx.ErrNoRows) {
		return sum, fmt.Errorf("campaign %d: %w", key, ErrNoCampaign)
	}
	if err != nil {
		return sum, fmt.Errorf("summarize campaign %d: %w", key, err)
	}
	rows, err := q.Query(ctx, `SELECT state::text, count(*) FROM frontier WHERE campaign = $1 GROUP BY state`, key)
	if err != nil {
		return sum, fmt.Errorf("summarize campaign %d: %w", key, err)
	}
	for rows.Next() {
		var state string
		var n int64
		if err := rows.Scan(&state, &n); err != nil {
			rows.Close()
			return sum, err
		}
		sum.URLs += n
		switch state {
		case Pending:
			sum.Pending = n
		case Leased:
			sum.Leased = n
		case Fetched:
			sum.Fetched = n
		case Failed:
			sum.Failed = n
		case Excluded:
			sum.Excluded = n
		}
	}
	if err := rows.Err(); err != nil {
		return sum, err
	}
	sum.PerNode = map[string]int64{}
	rows, err = q.Query(ctx, `
		SELECT node, count(*), coalesce(sum(content_length), 0), max(fetched_at)
		FROM pages WHERE campaign = $1 GROUP BY node ORDER BY node`, key)
	if err != nil {
		return sum, fmt.Errorf("summarize pages of campaign %d: %w", key, err)
	}
	var last time.Time
	for rows.Next() {
		var node string
		var n, bytes int64
		var at time.Time
		if err := rows.Scan(&node, &n, &bytes, &at); err != nil {
			rows.Close()
			return sum, err
		}
		sum.PerNode[node] = n
		sum.Pages += n
		sum.Bytes += bytes
		if at.After(last) {
			last = at
		}
	}
	if err := rows.Err(); err != nil {
		return sum, err
	}
	switch {
	case finished != nil:
		sum.FinishedAt = *finished
	case !last.IsZero():
		sum.FinishedAt = last
	default:
		sum.FinishedAt = time.Now()
	}
	if sum.Seconds = sum.FinishedAt.Sub(sum.StartedAt).Seconds(); sum.Seconds > 0 {
		sum.PagesPerSecond = float64(sum.Pages) / sum.Seconds
	}
	return sum, nil
}

// FinishCampaign records the outcome and summary and returns the summary.
//
// A campaign that ends other than completed keeps nothing for its
// processors (dropBodies): their pages are private content, and no run
// will deliver them from there. Its summary is computed first, so it
// tells the run as it ended; a retry of the finish answers with the
// summary stored. All of it is one transaction.
func (s *Store) FinishCampaign(ctx context.Context, key int64, outcome string, runs int) (campaign.Summary, error) {
	var sum campaign.Summary
	err := s.retryTx(ctx, func(tx pgx.Tx) error {
		var (
			status       string
			stored, spec []byte
		)
		err := tx.QueryRow(ctx, `SELECT status, summary, spec FROM campaigns WHERE key = $1 FOR NO KEY UPDATE`, key).
			Scan(&status, &stored, &spec)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("campaign %d: %w", key, ErrNoCampaign)
		}
		if err != nil {
			return err
		}
		dropping := outcome != campaign.OutcomeCompleted
		if dropping && status == outcome && stored != nil {
			// This finish, retried after it committed: its bodies are
			// gone, and its pages back to pending, so only the summary
			// stored tells the run as it ended. (A run started again
			// under the ID set the status back to running.)
			sum = campaign.Summary{}
			return json.Unmarshal(stored, &sum)
		}
		if _, err := tx.Exec(ctx, `
			WITH c AS (UPDATE campaigns SET finished_at = now(), status = $2 WHERE key = $1 RETURNING key)
			SELECT pg_notify($3, key::text)::text FROM c`, key, outcome, PolicyChannel); err != nil {
			return err
		}
		if sum, err = summarize(ctx, tx, key); err != nil {
			return err
		}
		sum.Outcome, sum.Runs = outcome, runs
		if dropping {
			decoded, err := campaign.DecodeSpec(spec)
			if err != nil {
				return fmt.Errorf("stored spec: %w", err)
			}
			var series string
			if decoded.Recrawl != nil {
				series = decoded.Recrawl.Series
			}
			if sum.Unprocessed, err = dropBodies(ctx, tx, key, outcome, len(decoded.Processors) > 0, series); err != nil {
				return fmt.Errorf("drop the bodies kept for processors: %w", err)
			}
		}
		doc, err := json.Marshal(sum)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE campaigns SET summary = $2 WHERE key = $1`, key, doc)
		return err
	})
	if err != nil {
		return campaign.Summary{}, fmt.Errorf("finish campaign %d: %w", key, err)
	}
	return sum, nil
}

// dropBodies drops every body a campaign keeps for its processors, with
// the pages waiting for them and the batches out: its chunks, and the
// bodies releases before v0.11.0 kept per page (page_bodies, with pending
// or leased deliveries rows), which a campaign of theirs terminated and
// started again under its ID still has (see docs/upgrading.md). A page that some processor had still to take
// goes back to pending, its attempts reset and the reason in last_error,
// so that a run started again under the campaign's ID fetches it and
// delivers it then; it says how many. Pages every processor took stay as
// they are, and so do failed deliveries, which are records.
//
// With fence (the campaign has processors), URLs still leased go back to
// pending first: a node fetching them when the campaign ended commits
// after this, and its commit, holding them no longer, records nothing and
// keeps no body. Otherwise its bodies would come after the drop and stay.
// A commit under way waits on the rows, and is then dropped with the rest.
//
// In a recurring campaign (series set) such a page would be skipped as not
// due, or answer 304, and reach no processor: its series forgets the fetch
// of its last version (last_fetched and the validators; its digest and
// interval stay), so it is due at once and asked unconditionally.
func dropBodies(ctx context.Context, tx pgx.Tx, key int64, outcome string, fence bool, series string) (int64, error) {
	if fence {
		if _, err := tx.Exec(ctx, `
			UPDATE frontier SET state = 'pending', lease_id = NULL, lease_holder = NULL, lease_expires_at = NULL
			WHERE campaign = $1 AND state = 'leased'`, key); err != nil {
			return 0, err
		}
	}
	fingerprints, err := collectIDs(tx.Query(ctx, `
		WITH undone AS (
			SELECT url_id AS id FROM deliveries WHERE campaign = $1 AND state IN ('pending', 'leased')
			UNION SELECT unnest(ids) FROM delivery_batches WHERE campaign = $1 AND ids IS NOT NULL
			UNION SELECT unnest(ids) FROM chunk_deliveries WHERE campaign = $1
		)
		UPDATE frontier f SET state = 'pending', attempts = 0, next_attempt_at = now(), finished_at = NULL,
		       last_error = $2, lease_id = NULL, lease_holder = NULL, lease_expires_at = NULL
		FROM undone
		WHERE f.id = undone.id AND f.campaign = $1 AND f.state <> 'pending'
		RETURNING f.fingerprint`,
		key, bodyDroppedReason(outcome)))
	if err != nil {
		return 0, err
	}
	if series != "" && len(fingerprints) > 0 {
		if _, err := tx.Exec(ctx, `
			UPDATE url_history SET last_fetched = NULL, etag = NULL, last_modified = NULL
			WHERE series = $1 AND fingerprint = ANY($2)`, series, fingerprints); err != nil {
			return 0, fmt.Errorf("url_history: %w", err)
		}
	}
	for _, table := range []string{"deliveries", "delivery_batches", "chunk_deliveries", "body_chunks", "page_bodies"} {
		q := `DELETE FROM ` + table + ` WHERE campaign = $1`
		if table == "deliveries" {
			q += ` AND state IN ('pending', 'leased')`
		}
		if _, err := tx.Exec(ctx, q, key); err != nil {
			return 0, fmt.Errorf("%s: %w", table, err)
		}
	}
	return int64(len(fingerprints)), nil
}

// bodyDroppedReason is the last_error of a page put back to pending when
// its campaign ended with outcome before every processor took it.
func bodyDroppedReason(outcome string) string {
	return "body dropped: campaign " + outcome + " before every processor took the page; fetched again if the campaign is started again"
}

// RetryFailed puts a campaign's failed URLs back to pending with their
// attempts reset, and returns how many.
func (s *Store) RetryFailed(ctx context.Context, campaignKey int64) (int, error) {
	tag, err := s.pool.Exec(ctx, `
		UPDATE frontier SET state = 'pending', attempts = 0, next_attempt_at = now(), finished_at = NULL
		WHERE campaign = $1 AND state = 'failed'`, campaignKey)
	if err != nil {
		return 0, fmt.Errorf("re-queue failed URLs of campaign %d: %w", campaignKey, err)
	}
	return int(tag.RowsAffected()), nil
}

// CampaignRef names a campaign: its key and ID (its workflow's ID).
type CampaignRef struct {
	Key int64
	ID  string
}

// RunningCampaigns lists the campaigns Postgres holds as running.
func (s *Store) RunningCampaigns(ctx context.Context) ([]CampaignRef, error) {
	rows, err := s.pool.Query(ctx, `SELECT key, id FROM campaigns WHERE status = 'running' ORDER BY key`)
	if err != nil {
		return nil, fmt.Errorf("running campaigns: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (CampaignRef, error) {
		var c CampaignRef
		return c, r.Scan(&c.Key, &c.ID)
	})
}

// collectIDs reads a column of ids.
func collectIDs(rows pgx.Rows, err error) ([]int64, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}
