package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
)

// Processed is what a processor made of one leased page.
type Processed struct {
	ID    int64
	Items []json.RawMessage
	Links int
	// Error fails the page for the processor.
	Error string
}

// StoreProcessed records a processor's results for pages it leased under
// l: items replace any the page had from this processor (a retried batch
// never adds twice), and each page's delivery ends done, or failed with
// its error. A page the lease no longer holds (recorded already, or
// returned to pending by a later run) is left alone. Chunks no processor
// has pages of any more are dropped.
func (s *Store) StoreProcessed(ctx context.Context, l Lease, results []Processed) (int, error) {
	firsts := firstPerPage(results)
	var stored int
	err := s.retryTx(ctx, func(tx pgx.Tx) error {
		held, chunks, err := recordBatch(ctx, tx, l, firsts)
		if stored = len(held); err != nil || stored == 0 {
			return err
		}
		if err := replaceItems(ctx, tx, l, firsts, held); err != nil {
			return err
		}
		return dropChunks(ctx, tx, l.CampaignKey, distinct(chunks))
	})
	if err != nil {
		return 0, fmt.Errorf("store results of processor %s for campaign %d: %w", l.Processor, l.CampaignKey, err)
	}
	return stored, nil
}

// firstPerPage is the first entry of each page in results: a page twice
// in one result counts once.
func firstPerPage(results []Processed) []Processed {
	var firsts []Processed
	once := make(map[int64]bool, len(results))
	for _, r := range results {
		if !once[r.ID] {
			once[r.ID] = true
			firsts = append(firsts, r)
		}
	}
	return firsts
}

// replaceItems keeps the items of the pages of results that the batch
// held and the processor did not fail. A page's items replace any it had
// from this processor (a delivery retried after retry-failed), never add
// to them.
func replaceItems(ctx context.Context, tx pgx.Tx, l Lease, results []Processed, held map[int64]bool) error {
	var (
		ids   []int64
		seqs  []int32
		items []string
	)
	for _, r := range results {
		if !held[r.ID] || r.Error != "" {
			continue
		}
		for seq, it := range r.Items {
			ids, seqs, items = append(ids, r.ID), append(seqs, int32(seq)), append(items, string(it))
		}
	}
	if len(ids) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, `DELETE FROM items WHERE campaign = $1 AND processor = $2 AND url_id = ANY($3)`,
		l.CampaignKey, l.Processor, ids); err != nil {
		return fmt.Errorf("items: %w", err)
	}
	if _, err := tx.Exec(ctx, `
		INSERT INTO items (campaign, processor, url_id, seq, item)
		SELECT $1, $2, i.id, i.seq, i.item::jsonb
		FROM unnest($3::bigint[], $4::int[], $5::text[]) AS i(id, seq, item)`,
		l.CampaignKey, l.Processor, ids, seqs, items); err != nil {
		return fmt.Errorf("items: %w", err)
	}
	return nil
}

// failedColumns are the failed outcomes of results, as columns.
func failedColumns(results []Processed) (ids []int64, errs []string, links []int32) {
	for _, r := range results {
		ids, errs, links = append(ids, r.ID), append(errs, r.Error), append(links, int32(r.Links))
	}
	return ids, errs, links
}

// recordBatch records the outcomes of the pages a lease's batch holds,
// and says which it held and the chunk of each: the batch's row goes (a
// store of the same batch beside this one waits on it, then finds
// nothing), a failed page's delivery is kept failed with its error, and
// the done pages are counted in processed_batches.
func recordBatch(ctx context.Context, tx pgx.Tx, l Lease, results []Processed) (map[int64]bool, []int64, error) {
	var holds, chunks []int64
	err := tx.QueryRow(ctx, `
		DELETE FROM delivery_batches WHERE campaign = $1 AND processor = $2 AND lease = $3 RETURNING ids, chunks`,
		l.CampaignKey, l.Processor, l.ID).Scan(&holds, &chunks)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	held := make(map[int64]bool, len(holds))
	for _, id := range holds {
		held[id] = true
	}
	var failed []Processed
	var done, items int64
	for _, r := range results {
		switch {
		case !held[r.ID]:
		case r.Error != "":
			failed = append(failed, r)
		default:
			done++
			items += int64(len(r.Items))
		}
	}
	if len(failed) > 0 {
		ids, errs, links := failedColumns(failed)
		if _, err := tx.Exec(ctx, `
			INSERT INTO deliveries AS d (campaign, processor, url_id, state, attempts, error, links, done_at)
			SELECT $1, $2, r.id, 'failed', 1, r.err, r.links, now()
			FROM unnest($3::bigint[], $4::text[], $5::int[]) AS r(id, err, links)
			ON CONFLICT (campaign, url_id, processor) DO UPDATE SET state = 'failed', error = excluded.error, done_at = now()`,
			l.CampaignKey, l.Processor, ids, errs, links); err != nil {
			return nil, nil, err
		}
	}
	if done > 0 {
		if _, err := tx.Exec(ctx, `
			INSERT INTO processed_batches (campaign, processor, pages, items) VALUES ($1, $2, $3, $4)`,
			l.CampaignKey, l.Processor, done, items); err != nil {
			return nil, nil, err
		}
	}
	return held, chunks, nil
}

// DeliveryPages gives the pages of ids, leased to a processor under l,
// as links are made from them: where each answered from, its depth and
// its shard.
func (s *Store) DeliveryPages(ctx context.Context, l Lease, ids []int64) (map[int64]LeasedPage, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, url, depth FROM frontier WHERE campaign = $1 AND id = ANY($2)`, l.CampaignKey, ids)
	if err != nil {
		return nil, fmt.Errorf("pages of campaign %d: %w", l.CampaignKey, err)
	}
	out := map[int64]LeasedPage{}
	var p LeasedPage
	if _, err := pgx.ForEachRow(rows, []any{&p.ID, &p.URL, &p.Depth}, func() error { p.FinalURL = p.URL; out[p.ID] = p; return nil }); err != nil {
		return nil, fmt.Errorf("pages of campaign %d: %w", l.CampaignKey, err)
	}
	// Where each answered from is in its chunk, which the batch names.
	var held, chunks []int64
	err = s.pool.QueryRow(ctx, `SELECT ids, chunks FROM delivery_batches WHERE campaign = $1 AND processor = $2 AND lease = $3`,
		l.CampaignKey, l.Processor, l.ID).Scan(&held, &chunks)
	if errors.Is(err, pgx.ErrNoRows) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pages of campaign %d: %w", l.CampaignKey, err)
	}
	from := chunkOf(held, chunks)
	var theirs []int64
	for id := range out {
		if c, ok := from[id]; ok {
			theirs = append(theirs, c)
		}
	}
	if len(theirs) == 0 {
		return out, nil
	}
	err = readChunks(ctx, s.pool, chunksOfCampaign, []any{distinct(theirs), l.CampaignKey}, func(chunk int64, _ string, c *chunkPage) {
		if p, ok := out[c.ID]; ok && from[c.ID] == chunk {
			p.FinalURL = c.Final
			out[c.ID] = p
		}
	})
	if err != nil {
		return nil, fmt.Errorf("pages of campaign %d: %w", l.CampaignKey, err)
	}
	return out, nil
}

// PageKey is a page's idempotency key for processors: the campaign ID and
// the page's frontier row, which never changes.
func PageKey(campaignID string, id int64) string { return campaignID + "/" + strconv.FormatInt(id, 10) }
