package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/spiderpool/spiderpool/campaign"
)

// Delivery states of a page a processor wants: pending in its chunk's
// deliveries (chunks.go), leased while a batch holds it in its
// delivery_batches row, then done (counted in processed_batches) or
// failed (a deliveries row, with the error).
const (
	DeliveryPending = "pending"
	DeliveryLeased  = "leased"
	DeliveryDone    = "done"
	DeliveryFailed  = "failed"
)

// DeliveryLease is a batch of pages leased to one processor.
type DeliveryLease struct {
	Pages []LeasedPage
	// Waiting counts the processor's pages pending after this lease (not
	// those in batches: the window bounds them), up to the count asked
	// for (see LeaseDeliveries).
	Waiting int
}

// LeasedPage is one page of a DeliveryLease.
type LeasedPage struct {
	ID       int64
	URL      string
	FinalURL string
	Depth    int
	Status   int
	// Header is the response's header as kept: a JSON object of arrays
	// of strings, passed on as it is to a processor that gets the batch
	// over HTTP (decoding and encoding it again was half of what a node
	// spent serving a batch).
	Header      json.RawMessage
	ContentType string
	FetchedAt   time.Time
	Length      int64
	// Body is set when the page's body fits the inline limits; Token and
	// SHA256 name it otherwise.
	Body   []byte
	Token  string
	SHA256 string
}

// Lease names a batch of a processor's pages. The batch holds them in its
// delivery_batches row, out of their chunks' deliveries, until its
// outcome is stored or a later run takes them back.
type Lease struct {
	CampaignKey int64
	CampaignID  string
	Processor   string
	// ID names the batch (campaign.DeliveryLeaseRequest.Lease): asked
	// again, a lease answers with the pages it holds.
	ID int64
	// Held is ignored: every lease holds its pages.
	//
	// Deprecated: callers need not set it.
	Held bool
}

// heldBatch is what a lease holds: its pages in id order, the chunk of
// each (chunks[i] that of ids[i]), and the token the batch is served
// under.
type heldBatch struct {
	ids, chunks []int64
	token       string
}

// waitingSQL counts a processor's pages pending, up to $3.
const waitingSQL = `SELECT least($3, (` + chunksWaitingSQL + `))::int`

// DeliveriesWaiting counts, up to countTo, a processor's pages pending.
func (s *Store) DeliveriesWaiting(ctx context.Context, campaignKey int64, processor string, countTo int) (int, error) {
	var n int
	if err := s.pool.QueryRow(ctx, waitingSQL, campaignKey, processor, countTo).Scan(&n); err != nil {
		return 0, fmt.Errorf("count pages waiting for processor %s of campaign %d: %w", processor, campaignKey, err)
	}
	return n, nil
}

// LeaseDeliveries leases up to max pending pages to a processor under
// lease, oldest first; asked again for the same lease (a retried call whose
// answer was lost), it answers with the pages that lease holds. A body up
// to inline bytes travels in the lease while the batch's inline bodies
// stay within batchBytes; a larger one goes by its token. Waiting counts,
// up to countTo, what is still pending after it.
func (s *Store) LeaseDeliveries(ctx context.Context, l Lease, max int, inline, batchBytes int64, countTo int) (DeliveryLease, error) {
	var out DeliveryLease
	err := s.retryTx(ctx, func(tx pgx.Tx) error {
		out = DeliveryLease{}
		b, err := leaseOrReclaim(ctx, tx, l, max)
		if err != nil {
			return err
		}
		if out.Pages, err = leasedPages(ctx, tx, l.CampaignKey, b.ids, b.chunks, inline, batchBytes); err != nil {
			return err
		}
		return tx.QueryRow(ctx, waitingSQL, l.CampaignKey, l.Processor, countTo).Scan(&out.Waiting)
	})
	if err != nil {
		return DeliveryLease{}, fmt.Errorf("lease pages of campaign %d for processor %s: %w", l.CampaignKey, l.Processor, err)
	}
	return out, nil
}

// BatchLease is a batch leased to a processor that takes its batches by
// reference: the pages' ids and the token a node serves them under.
type BatchLease struct {
	IDs     []int64
	Token   string
	Waiting int // as in DeliveryLease
}

// LeaseBatch leases a batch as LeaseDeliveries does, without reading its
// pages: it names the batch by its token instead, the same token when
// asked again for the same lease. An empty batch has no token.
func (s *Store) LeaseBatch(ctx context.Context, l Lease, max, countTo int) (BatchLease, error) {
	var out BatchLease
	err := s.retryTx(ctx, func(tx pgx.Tx) error {
		b, err := leaseOrReclaim(ctx, tx, l, max)
		if err != nil {
			return err
		}
		out = BatchLease{IDs: b.ids, Token: b.token}
		return tx.QueryRow(ctx, waitingSQL, l.CampaignKey, l.Processor, countTo).Scan(&out.Waiting)
	})
	if err != nil {
		return BatchLease{}, fmt.Errorf("lease a batch of campaign %d for processor %s: %w", l.CampaignKey, l.Processor, err)
	}
	return out, nil
}

// ErrNoBatch is returned for a token that names no batch in flight.
var ErrNoBatch = errors.New("no such batch (its outcome was stored, or its run ended, or the token is wrong)")

// Batch is a batch a token names: its campaign, processor and pages, each
// body by its token.
type Batch struct {
	CampaignKey int64
	CampaignID  string
	Processor   string
	Pages       []LeasedPage
}

// BatchByToken reads the batch a token names (see LeaseBatch). Bodies
// come with their pages as LeaseDeliveries sends them: each up to inline
// bytes while the batch's stay within batchBytes, any other by its token.
func (s *Store) BatchByToken(ctx context.Context, token string, inline, batchBytes int64) (Batch, error) {
	var b Batch
	err := s.retryTx(ctx, func(tx pgx.Tx) error {
		var ids, chunks []int64
		err := tx.QueryRow(ctx, `SELECT campaign, campaign_id, processor, ids, chunks FROM delivery_batches WHERE token = $1`, token).
			Scan(&b.CampaignKey, &b.CampaignID, &b.Processor, &ids, &chunks)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && len(ids) == 0) {
			return ErrNoBatch
		}
		if err != nil {
			return err
		}
		b.Pages, err = leasedPages(ctx, tx, b.CampaignKey, ids, chunks, inline, batchBytes)
		return err
	})
	if err != nil && !errors.Is(err, ErrNoBatch) {
		return Batch{}, fmt.Errorf("batch %s: %w", token, err)
	}
	return b, err
}

// leaseOrReclaim leases as holdPages does, for a run that has not ended
// (endedRun): a lease of an ended run, one its ProcessBatch child
// started before it was terminated at continue-as-new, takes nothing.
// A lease that leases nothing first takes back what other runs' batches
// still hold, then leases again. The reset did that already for leases
// made before it; this is for the rest: a batch of the run's own that
// leased before the run's reset did (or while it failed): its pages
// would wait for nobody while the processor looked dry. It never takes
// back the live run's batches (see releaseOtherRuns).
func leaseOrReclaim(ctx context.Context, tx pgx.Tx, l Lease, max int) (heldBatch, error) {
	ended, live, err := endedRun(ctx, tx, l)
	if err != nil || ended {
		return heldBatch{}, err
	}
	b, err := holdPages(ctx, tx, l, max)
	if err != nil || len(b.ids) > 0 {
		return b, err
	}
	switch n, err := releaseOtherRuns(ctx, tx, l.CampaignKey, l.Processor, campaign.LeaseRun(l.ID), live); {
	case err != nil:
		return heldBatch{}, err
	case n == 0:
		return heldBatch{}, nil
	}
	return holdPages(ctx, tx, l, max)
}

// holdPages leases up to max of a processor's pending pages under l, or
// finds those it holds already (a retried lease). The pages leave their
// chunks' deliveries (holdChunks) for the batch's delivery_batches row,
// which keeps the chunk of each and names the batch by a token. A lease
// of nothing makes no row.
func holdPages(ctx context.Context, tx pgx.Tx, l Lease, max int) (heldBatch, error) {
	var b heldBatch
	err := tx.QueryRow(ctx, `SELECT token, ids, chunks FROM delivery_batches WHERE campaign = $1 AND processor = $2 AND lease = $3`,
		l.CampaignKey, l.Processor, l.ID).Scan(&b.token, &b.ids, &b.chunks)
	if !errors.Is(err, pgx.ErrNoRows) { // found (a retried lease), or failed
		return b, err
	}
	if b.ids, b.chunks, err = holdChunks(ctx, tx, l, max); err != nil || len(b.ids) == 0 {
		return heldBatch{}, err
	}
	if b.token, err = randomToken(); err != nil {
		return heldBatch{}, err
	}
	_, err = tx.Exec(ctx, `
		INSERT INTO delivery_batches (token, campaign, campaign_id, processor, lease, ids, chunks) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		b.token, l.CampaignKey, l.CampaignID, l.Processor, l.ID, b.ids, b.chunks)
	return b, err
}

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
func (s *Store) StoreProcessed(ctx context.Context, l Lease, results []Processed) (stored int, err error) {
	var firsts []Processed // each page's first entry: a page twice in one result counts once
	once := make(map[int64]bool, len(results))
	for _, r := range results {
		if !once[r.ID] {
			once[r.ID] = true
			firsts = append(firsts, r)
		}
	}
	err = s.retryTx(ctx, func(tx pgx.Tx) error {
		held, chunks, err := recordBatch(ctx, tx, l, firsts)
		if err != nil {
			return err
		}
		stored = len(held)
		if stored == 0 {
			return nil
		}
		var (
			iIDs  []int64
			iSeq  []int32
			iItem []string
		)
		for _, r := range firsts {
			if held[r.ID] && r.Error == "" {
				for seq, it := range r.Items {
					iIDs = append(iIDs, r.ID)
					iSeq = append(iSeq, int32(seq))
					iItem = append(iItem, string(it))
				}
			}
		}
		if len(iIDs) > 0 {
			// A page's items replace any it had (a delivery retried after
			// retry-failed), never add to them.
			if _, err := tx.Exec(ctx, `
				DELETE FROM items WHERE campaign = $1 AND processor = $2 AND url_id = ANY($3)`,
				l.CampaignKey, l.Processor, iIDs); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `
				INSERT INTO items (campaign, processor, url_id, seq, item)
				SELECT $1, $2, i.id, i.seq, i.item::jsonb
				FROM unnest($3::bigint[], $4::int[], $5::text[]) AS i(id, seq, item)`,
				l.CampaignKey, l.Processor, iIDs, iSeq, iItem); err != nil {
				return fmt.Errorf("items: %w", err)
			}
		}
		return dropChunks(ctx, tx, l.CampaignKey, distinct(chunks))
	})
	if err != nil {
		return 0, fmt.Errorf("store results of processor %s for campaign %d: %w", l.Processor, l.CampaignKey, err)
	}
	return stored, nil
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

// DropBatch forgets a batch's token.
//
// Deprecated: a batch's row goes when its outcome is stored
// (StoreProcessed), so nothing is left to drop.
func (s *Store) DropBatch(ctx context.Context, token string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM delivery_batches WHERE token = $1`, token); err != nil {
		return fmt.Errorf("drop batch %s: %w", token, err)
	}
	return nil
}

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

// Item is one item as `campaign export --items` writes it.
type Item struct {
	Processor string          `json:"processor"`
	URL       string          `json:"url"`
	Item      json.RawMessage `json:"item"`
	// CarriedFrom, on an item of a page that did not change in this run
	// of a recurring campaign (see Carry), is the ID of the run that
	// fetched the version the processor made it of.
	CarriedFrom string `json:"carried_from,omitempty"`
}

// ExportItems streams a campaign's items (one processor's, when named),
// by processor, page and order within the page.
func (s *Store) ExportItems(ctx context.Context, campaignKey int64, processor string, fn func(Item) error) (int, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT i.processor, f.url, i.item::text, coalesce(c.id, '')
		FROM items i JOIN frontier f ON f.id = i.url_id
		LEFT JOIN campaigns c ON c.key = i.carried_from
		WHERE i.campaign = $1 AND ($2 = '' OR i.processor = $2)
		ORDER BY i.processor, i.url_id, i.seq`, campaignKey, processor)
	if err != nil {
		return 0, fmt.Errorf("export items of campaign %d: %w", campaignKey, err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var it Item
		var raw string
		if err := rows.Scan(&it.Processor, &it.URL, &raw, &it.CarriedFrom); err != nil {
			return n, fmt.Errorf("export items of campaign %d: %w", campaignKey, err)
		}
		it.Item = json.RawMessage(raw)
		if err := fn(it); err != nil {
			return n, err
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return n, fmt.Errorf("export items of campaign %d: %w", campaignKey, err)
	}
	return n, nil
}

// PageBody is what processors get of a fetched page, kept in a chunk of
// its commit (chunks.go) until every processor named has taken it.
type PageBody struct {
	Processors []string
	// URL and Depth are the frontier's, of the URL fetched.
	URL         string
	Depth       int
	FinalURL    string
	Status      int
	Header      http.Header
	ContentType string
	FetchedAt   time.Time
	Body        []byte
	// Chunked is ignored: every body is kept in a chunk.
	//
	// Deprecated: callers need not set it.
	Chunked bool
}

// chunkedBodies are the pages a commit keeps for processors, beside its
// outcomes (see recordOutcomes).
type chunkedBodies struct{ pages []chunkPage }

func (b *chunkedBodies) empty() bool { return len(b.pages) == 0 }

// add keeps p, the body of page id, for a chunk of the commit.
func (b *chunkedBodies) add(id int64, p *PageBody) error {
	h, err := json.Marshal(p.Header)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(p.Body)
	b.pages = append(b.pages, chunkPage{
		ID: id, URL: p.URL, Depth: p.Depth, Final: p.FinalURL, Status: p.Status, Header: h,
		CType: p.ContentType, At: p.FetchedAt, SHA256: hex.EncodeToString(sum[:]), body: p.Body, processors: p.Processors,
	})
	return nil
}

// commit keeps a commit's pages in chunks in tx, then records its
// outcomes (outcomesSQL with args, $1 being the campaign) and says which
// it recorded; the pages of the others (their URLs no longer held by
// this holder) are taken out of the chunks' deliveries again. Outcomes
// go last because their update locks the URLs' frontier rows until the
// commit, and every concurrent insert of a link to one of them waits for
// that: bodies written after the update held those rows for the whole
// write (in a 100,000-page crawl with a no-op processor, the link
// inserts took 38.9 s of statement time against 25.2 s without a
// processor; written first, 24.8 s against 25.9 s).
func (b *chunkedBodies) commit(ctx context.Context, tx pgx.Tx, args []any) (map[int64]bool, error) {
	campaignKey := args[0]
	chunks, err := b.writeChunks(ctx, tx, campaignKey)
	if err != nil {
		return nil, err
	}
	accepted, err := readAccepted(tx.Query(ctx, outcomesSQL+` SELECT id FROM u`, args...))
	if err != nil {
		return nil, err
	}
	var lost []int64
	for _, p := range b.pages {
		if !accepted[p.ID] {
			lost = append(lost, p.ID)
		}
	}
	if len(lost) > 0 {
		if err := dropLostChunked(ctx, tx, campaignKey, chunks, lost); err != nil {
			return nil, err
		}
	}
	return accepted, nil
}

// ErrNoBody is returned for a token that names no kept body.
var ErrNoBody = errors.New("no such body (its pages were all processed, or the token is wrong)")

// Body returns the body a token names, and its content type.
func (s *Store) Body(ctx context.Context, token string) ([]byte, string, error) {
	found := map[string]chunkPage{}
	if err := chunkBodies(ctx, s.pool, []string{token}, found); err != nil {
		return nil, "", fmt.Errorf("body %s: %w", token, err)
	}
	p, ok := found[token]
	if !ok {
		return nil, "", ErrNoBody
	}
	return p.body, p.CType, nil
}

// Bodies returns the kept bodies that tokens name, by token; a token that
// names none is left out.
func (s *Store) Bodies(ctx context.Context, tokens []string) (map[string][]byte, error) {
	found := map[string]chunkPage{}
	if err := chunkBodies(ctx, s.pool, tokens, found); err != nil {
		return nil, fmt.Errorf("bodies: %w", err)
	}
	out := make(map[string][]byte, len(found))
	for t, p := range found {
		out[t] = p.body
	}
	return out, nil
}

// randomToken is 16 random bytes in hex: a name nobody can guess.
func randomToken() (string, error) {
	var tok [16]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(tok[:]), nil
}

// collectIDs reads a column of ids.
func collectIDs(rows pgx.Rows, err error) ([]int64, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}
