package store

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
)

// Body chunks (processors version 8, migration 0019): a commit keeps the
// bodies of its pages in body_chunks, a row for up to chunkBytes of them,
// and each processor's deliveries of a chunk's pages in a chunk_deliveries
// row. A lease takes rows whole, or the head of one, and its batch keeps
// the chunk of each page it took (delivery_batches.chunks); storing the
// batch's outcome drops the chunks that no processor has pages of left.

// chunkBytes bounds the bodies of one chunk, so that a body read by its
// token reads little else: a commit of pages larger than that is kept in
// several chunks.
const chunkBytes = 1 << 20

// writeChunks keeps the commit's pages in chunks of up to chunkBytes of
// bodies, with each processor's deliveries of them, and its originals in
// chunks of their own; it says which chunks it wrote.
func (b *chunkedBodies) writeChunks(ctx context.Context, tx pgx.Tx, campaignKey any) ([]int64, error) {
	chunks, err := writeChunksOf(ctx, tx, campaignKey, b.pages)
	if err != nil {
		return nil, err
	}
	originals, err := writeChunksOf(ctx, tx, campaignKey, b.originals)
	return append(chunks, originals...), err
}

// writeChunksOf keeps pages, each once, in chunks of up to chunkBytes of
// bodies, in id order.
func writeChunksOf(ctx context.Context, tx pgx.Tx, campaignKey any, pages []chunkPage) ([]int64, error) {
	pages = slices.Clone(pages)
	slices.SortFunc(pages, func(x, y chunkPage) int { return cmp.Compare(x.ID, y.ID) })
	var chunks []int64
	for len(pages) > 0 {
		n, size := 0, 0
		for n < len(pages) && (n == 0 || size+len(pages[n].body) <= chunkBytes) {
			size += len(pages[n].body)
			n++
		}
		id, err := writeChunk(ctx, tx, campaignKey, pages[:n])
		if err != nil {
			return nil, err
		}
		chunks, pages = append(chunks, id), pages[n:]
	}
	return chunks, nil
}

// writeChunk keeps one chunk and its deliveries, and says its id.
func writeChunk(ctx context.Context, tx pgx.Tx, campaignKey any, pages []chunkPage) (int64, error) {
	blob := encodeChunk(pages)
	secret, err := randomToken()
	if err != nil {
		return 0, err
	}
	var procs []string
	var ids []int64
	for _, p := range pages {
		for _, name := range p.processors {
			procs, ids = append(procs, name), append(ids, p.ID)
		}
	}
	var id int64
	err = tx.QueryRow(ctx, `
		WITH c AS (INSERT INTO body_chunks (campaign, secret, pages) VALUES ($1, $2, $3) RETURNING id),
		d AS (
			INSERT INTO chunk_deliveries (campaign, processor, chunk, ids)
			SELECT $1, d.processor, c.id, array_agg(d.id ORDER BY d.id)
			FROM c, unnest($4::text[], $5::bigint[]) AS d(processor, id)
			GROUP BY d.processor, c.id
		)
		SELECT id FROM c`, campaignKey, secret, blob, procs, ids).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("keep a chunk of %d pages: %w", len(pages), err)
	}
	return id, nil
}

// dropLostChunked takes pages the commit did not record (their URLs no
// longer held) out of its chunks' deliveries, and drops the chunks left
// with none. The chunks are the commit's own, seen by nobody yet.
func dropLostChunked(ctx context.Context, tx pgx.Tx, campaignKey any, chunks, lost []int64) error {
	if _, err := tx.Exec(ctx, `
		UPDATE chunk_deliveries SET ids = ARRAY(SELECT x FROM unnest(ids) x WHERE x <> ALL($3) ORDER BY x)
		WHERE campaign = $1 AND chunk = ANY($2)`, campaignKey, chunks, lost); err != nil {
		return fmt.Errorf("take pages no longer held out of their chunks: %w", err)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM chunk_deliveries WHERE campaign = $1 AND chunk = ANY($2) AND ids = '{}'`,
		campaignKey, chunks); err != nil {
		return fmt.Errorf("take pages no longer held out of their chunks: %w", err)
	}
	return dropChunks(ctx, tx, campaignKey, chunks)
}

// holdChunks leases, for l, up to most of a processor's pages kept in
// chunks, oldest chunks first: whole deliveries rows, and the
// head of the last when it has more than the room left. It says the
// pages, in id order, and the chunk of each.
func holdChunks(ctx context.Context, tx pgx.Tx, l Lease, most int) (ids, chunks []int64, err error) {
	type taken struct {
		chunk int64
		ids   []int64
	}
	var whole []int64
	var got []taken
	var part *taken // the row whose head is taken, and the rest it keeps
	// Rows are locked as they are read, so a lease reads about as many as
	// it takes: rows it locked and left would be skipped by the leases
	// beside it. The first look takes one; the next as many as the room
	// left needs at the size of the rows seen.
	after, room, look, seen, pages := int64(-1), most, 1, 0, 0
	for room > 0 && part == nil {
		rows, err := tx.Query(ctx, `
			SELECT chunk, ids FROM chunk_deliveries
			WHERE campaign = $1 AND processor = $2 AND chunk > $3
			ORDER BY chunk LIMIT $4
			FOR UPDATE SKIP LOCKED`, l.CampaignKey, l.Processor, after, look)
		if err != nil {
			return nil, nil, err
		}
		var found []taken
		var t taken
		if _, err := pgx.ForEachRow(rows, []any{&t.chunk, &t.ids}, func() error { found = append(found, t); return nil }); err != nil {
			return nil, nil, err
		}
		if len(found) == 0 {
			break
		}
		for _, t := range found {
			after, seen, pages = t.chunk, seen+1, pages+len(t.ids)
			if room == 0 || part != nil {
				break
			}
			if len(t.ids) <= room {
				whole, got, room = append(whole, t.chunk), append(got, t), room-len(t.ids)
				continue
			}
			got = append(got, taken{t.chunk, t.ids[:room]})
			part, room = &taken{t.chunk, t.ids[room:]}, 0
		}
		look = min(max(room*seen/max(pages, 1), 1), 64)
	}
	if len(whole) > 0 {
		if _, err := tx.Exec(ctx, `DELETE FROM chunk_deliveries WHERE campaign = $1 AND processor = $2 AND chunk = ANY($3)`,
			l.CampaignKey, l.Processor, whole); err != nil {
			return nil, nil, err
		}
	}
	if part != nil {
		if _, err := tx.Exec(ctx, `UPDATE chunk_deliveries SET ids = $4 WHERE campaign = $1 AND processor = $2 AND chunk = $3`,
			l.CampaignKey, l.Processor, part.chunk, part.ids); err != nil {
			return nil, nil, err
		}
	}
	type page struct{ id, chunk int64 }
	var all []page
	for _, t := range got {
		for _, id := range t.ids {
			all = append(all, page{id, t.chunk})
		}
	}
	slices.SortFunc(all, func(x, y page) int { return cmp.Compare(x.id, y.id) })
	for _, p := range all {
		ids, chunks = append(ids, p.id), append(chunks, p.chunk)
	}
	return ids, chunks, nil
}

// chunksWaitingSQL counts a processor's pages in chunks still to take,
// over its oldest $3 chunks (each has one at least): enough for a count
// up to $3.
const chunksWaitingSQL = `
	SELECT coalesce(sum(cardinality(ids)), 0) FROM (
		SELECT ids FROM chunk_deliveries
		WHERE campaign = $1 AND processor = $2
		ORDER BY chunk LIMIT $3) c`

// chunkOf maps each of ids to its chunk (chunks[i] that of ids[i]). A
// page is read from that chunk only: a retried commit can leave a
// refused page's copy in a later chunk too, which no delivery names. A
// page with no chunk (a batch row with ids and no chunks, which only
// releases before v0.11.0 wrote) is read from none.
func chunkOf(ids, chunks []int64) map[int64]int64 {
	m := make(map[int64]int64, len(ids))
	for i := range min(len(ids), len(chunks)) {
		m[ids[i]] = chunks[i]
	}
	return m
}

// leasedPages reads the pages of ids as processors get them, each from
// its chunk (chunks[i] that of ids[i]), in id order: a body up to inline
// bytes comes with its page while the bodies so far stay within
// batchBytes; any other goes by its token.
func leasedPages(ctx context.Context, q pgx.Tx, campaignKey int64, ids, chunks []int64, inline, batchBytes int64) ([]LeasedPage, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	want := chunkOf(ids, chunks)
	var out []LeasedPage
	err := readChunks(ctx, q, chunksOfCampaign, []any{distinct(chunks), campaignKey}, func(chunk int64, secret string, p *chunkPage) {
		if c, ok := want[p.ID]; !ok || c != chunk {
			return
		}
		out = append(out, LeasedPage{
			ID: p.ID, URL: p.URL, FinalURL: p.Final, Depth: p.Depth, Status: p.Status, Header: p.Header,
			ContentType: p.CType, FetchedAt: p.At, Length: int64(len(p.body)), Body: p.body,
			Token: chunkToken(chunk, p.ID, secret), SHA256: p.SHA256, Rendered: p.Rendered,
		})
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(x, y LeasedPage) int { return cmp.Compare(x.ID, y.ID) })
	budget := batchBytes
	for i := range out {
		if p := &out[i]; p.Length <= inline && p.Length <= budget {
			budget -= p.Length
		} else {
			p.Body = nil
		}
	}
	return out, nil
}

// Queries for readChunks: a campaign's chunks by id ($1, $2 the
// campaign), and chunks by id alone ($1), for body tokens, which are
// checked page by page against their chunk's secret.
const (
	chunksOfCampaign = `SELECT id, secret, pages FROM body_chunks WHERE id = ANY($1) AND campaign = $2`
	chunksByID       = `SELECT id, secret, pages FROM body_chunks WHERE id = ANY($1)`
)

// querier runs a query: the pool, or a transaction.
type querier interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}

// readChunks reads the chunks a query (chunksOfCampaign, chunksBySecret)
// finds, and calls fn with each page of each.
func readChunks(ctx context.Context, q querier, query string, args []any, fn func(chunk int64, secret string, p *chunkPage)) error {
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return err
	}
	var (
		id     int64
		secret string
		blob   []byte
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &secret, &blob}, func() error {
		pages, err := decodeChunk(blob)
		if err != nil {
			return fmt.Errorf("chunk %d: %w", id, err)
		}
		for i := range pages {
			fn(id, secret, &pages[i])
		}
		return nil
	})
	return err
}

// chunkBodies finds the bodies that chunk tokens name, into out: a
// token reads its page only if its secret is that page's.
func chunkBodies(ctx context.Context, q querier, tokens []string, out map[string]chunkPage) error {
	var chunks []int64
	named := map[string]bool{}
	asked := map[[2]int64]bool{} // chunk and page: only these are checked
	for _, t := range tokens {
		if c, id, ok := chunkTokenPage(t); ok {
			chunks, named[t], asked[[2]int64{c, id}] = append(chunks, c), true, true
		}
	}
	if len(chunks) == 0 {
		return nil
	}
	return readChunks(ctx, q, chunksByID, []any{distinct(chunks)}, func(chunk int64, secret string, p *chunkPage) {
		if !asked[[2]int64{chunk, p.ID}] {
			return // no HMAC for the chunk's other pages
		}
		for _, t := range []string{chunkToken(chunk, p.ID, secret), legacyChunkToken(chunk, p.ID, secret)} {
			if named[t] {
				out[t] = *p
			}
		}
	})
}

// dropChunks drops those of chunks that no processor has pages of left:
// none still to take, none in a batch out. Each is locked first, so two
// batches that took pages of one chunk and store their outcomes side by
// side do not each see the other still holding it: the second waits, and
// then sees.
func dropChunks(ctx context.Context, tx pgx.Tx, campaignKey any, chunks []int64) error {
	if _, err := tx.Exec(ctx, `SELECT 1 FROM body_chunks WHERE id = ANY($1) ORDER BY id FOR UPDATE`, chunks); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `DELETE FROM body_chunks b WHERE b.id = ANY($2) AND `+unheldChunk, campaignKey, chunks)
	return err
}

// unheldChunk is true of a chunk b of campaign $1 that no processor has
// pages of left: none still to take, none in a batch out.
const unheldChunk = `
	NOT EXISTS (SELECT 1 FROM chunk_deliveries d WHERE d.chunk = b.id)
	AND b.id NOT IN (SELECT unnest(chunks) FROM delivery_batches WHERE campaign = $1 AND chunks IS NOT NULL)`

// distinct is the values of xs, each once, in order.
func distinct(xs []int64) []int64 {
	out := slices.Clone(xs)
	slices.Sort(out)
	return slices.Compact(out)
}

// DropUnheldChunks drops a campaign's chunks that nothing refers to any
// more: no page of them still to take, none in a batch out. Stores drop
// chunks as they go (StoreProcessed; a commit, those left with no page
// it recorded), so this is a net for any left. References only ever
// move between a chunk's deliveries rows and batches, so a chunk with
// none gets none again: this is safe at any time.
func (s *Store) DropUnheldChunks(ctx context.Context, campaignKey int64) (int, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM body_chunks b WHERE b.campaign = $1 AND `+unheldChunk, campaignKey)
	if err != nil {
		return 0, fmt.Errorf("drop unheld chunks of campaign %d: %w", campaignKey, err)
	}
	return int(tag.RowsAffected()), nil
}
