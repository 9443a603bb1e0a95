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
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/spiderpool/spiderpool/campaign"
)

// Delivery states: a page a processor wants is pending, then leased to a
// batch of the campaign workflow, then done or failed.
//
// From processors version 8 the pending pages are kept in chunks, a
// commit's in a row (chunks.go). Before it, each page a processor wants
// cost a deliveries row beside its page_bodies row: written with the
// body, deleted by the lease that takes it; such rows (of runs before
// version 8, or written by nodes not yet upgraded) are still delivered,
// before any chunk. A campaign with one processor could do without the
// deliveries row, a body held by no batch being the page pending; tried
// and measured, it was no cheaper. The bodies are wide rows, read past
// in page order with the dead and the held ones until a vacuum comes: in
// 100,000-page crawls of 1 KB pages, each lease took 17 ms and each count
// of the pages waiting 10-14 ms (4.7-5.4 s of statement time in all,
// against 4.8 s for the deliveries rows' copy, lease, count and
// analyze), and the crawl was no faster: 0.83 of a crawl without a
// processor (median of two pairs), against 0.84 with the deliveries rows
// (one pair).
const (
	DeliveryPending = "pending"
	DeliveryLeased  = "leased"
	DeliveryDone    = "done"
	DeliveryFailed  = "failed"
)

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

// Lease names a batch of a processor's pages.
type Lease struct {
	CampaignKey int64
	CampaignID  string
	Processor   string
	// ID names the batch (campaign.DeliveryLeaseRequest.Lease): asked
	// again, a lease answers with the pages it holds.
	ID int64
	// Held: the batch holds its pages in its delivery_batches row, taking
	// their deliveries rows out of the table until its outcome is stored
	// (processors version 4). Else it marks the rows leased, as runs
	// before did.
	Held bool
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
	return releaseLeases(ctx, tx, campaignKey, processor, `(lease IS NULL OR lease >> 32 NOT IN ($3, $4))`, keepRun, liveRun)
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

// releaseLeases returns to pending what the leases that which picks ($3
// on: args) hold, marked or held by their batches, and says how many
// pages.
func releaseLeases(ctx context.Context, tx pgx.Tx, campaignKey int64, processor, which string, args ...any) (int, error) {
	all := append([]any{campaignKey, processor}, args...)
	tag, err := tx.Exec(ctx, `
		UPDATE deliveries SET state = 'pending'
		WHERE campaign = $1 AND processor = $2 AND state = 'leased' AND `+which, all...)
	if err != nil {
		return 0, err
	}
	// Batches that held their pages put them back: into deliveries
	// rows, or into their chunks' (merged with what those still have).
	held, err := tx.Query(ctx, `
		WITH gone AS (
			DELETE FROM delivery_batches WHERE campaign = $1 AND processor = $2 AND `+which+`
			RETURNING ids, chunks
		), rows AS (
			INSERT INTO deliveries (campaign, processor, url_id)
			SELECT $1, $2, unnest(ids) FROM gone WHERE ids IS NOT NULL AND chunks IS NULL
			ON CONFLICT DO NOTHING
			RETURNING 1
		), pages AS (
			SELECT p.id, p.chunk FROM gone, unnest(gone.ids, gone.chunks) AS p(id, chunk) WHERE gone.chunks IS NOT NULL
		), chunked AS (
			INSERT INTO chunk_deliveries AS d (campaign, processor, chunk, ids)
			SELECT $1, $2, chunk, array_agg(id ORDER BY id) FROM pages GROUP BY chunk
			ON CONFLICT (campaign, processor, chunk) DO UPDATE
			SET ids = ARRAY(SELECT DISTINCT x FROM unnest(d.ids || excluded.ids) x ORDER BY x)
		)
		SELECT (SELECT count(*) FROM rows) + (SELECT count(*) FROM pages)`, all...)
	if err != nil {
		return 0, err
	}
	back, err := pgx.CollectExactlyOneRow(held, pgx.RowTo[int64])
	return int(tag.RowsAffected() + back), err
}

// waitingSQL counts a processor's pages pending, up to $3: in deliveries
// rows and in chunks (chunksWaitingSQL). The order keeps the first on
// the index of pending rows: without it the planner, counting on pending
// rows to be many, read the table from its start, where the oldest rows
// are done (215 scans reading 7.2 million rows in a 60,000-page crawl).
const waitingSQL = `
	SELECT least($3, (
		SELECT count(*) FROM (
			SELECT 1 FROM deliveries
			WHERE campaign = $1 AND processor = $2 AND state = 'pending'
			ORDER BY url_id LIMIT $3) w) + (` + chunksWaitingSQL + `))::int`

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
		ids, chunks, _, err := leaseOrReclaim(ctx, tx, l, max)
		if err != nil {
			return err
		}
		if out.Pages, err = leasedPages(ctx, tx, l.CampaignKey, ids, chunks, inline, batchBytes); err != nil {
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
// pages: it names the batch by a token instead, the same token when asked
// again for the same lease. No token is made for an empty batch.
func (s *Store) LeaseBatch(ctx context.Context, l Lease, max, countTo int) (BatchLease, error) {
	var out BatchLease
	err := s.retryTx(ctx, func(tx pgx.Tx) error {
		out = BatchLease{}
		var err error
		if out.IDs, _, out.Token, err = leaseOrReclaim(ctx, tx, l, max); err != nil {
			return err
		}
		if len(out.IDs) > 0 && out.Token == "" {
			token, err := randomToken()
			if err != nil {
				return err
			}
			if err := tx.QueryRow(ctx, `
				INSERT INTO delivery_batches AS b (token, campaign, campaign_id, processor, lease)
				VALUES ($1, $2, $3, $4, $5)
				ON CONFLICT (campaign, processor, lease) DO UPDATE SET token = b.token
				RETURNING token`, token, l.CampaignKey, l.CampaignID, l.Processor, l.ID).Scan(&out.Token); err != nil {
				return err
			}
		}
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
		var lease int64
		var ids, chunks []int64
		err := tx.QueryRow(ctx, `SELECT campaign, campaign_id, processor, lease, ids, chunks FROM delivery_batches WHERE token = $1`, token).
			Scan(&b.CampaignKey, &b.CampaignID, &b.Processor, &lease, &ids, &chunks)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNoBatch
		}
		if err != nil {
			return err
		}
		if ids == nil { // a batch that marks its pages leased
			if ids, err = collectIDs(tx.Query(ctx, leasedIDsSQL, b.CampaignKey, b.Processor, lease)); err != nil {
				return err
			}
		}
		if len(ids) == 0 {
			return ErrNoBatch
		}
		b.Pages, err = leasedPages(ctx, tx, b.CampaignKey, ids, chunks, inline, batchBytes)
		return err
	})
	if err != nil && !errors.Is(err, ErrNoBatch) {
		return Batch{}, fmt.Errorf("batch %s: %w", token, err)
	}
	return b, err
}

// leasedIDsSQL finds the deliveries a lease holds.
const leasedIDsSQL = `
	SELECT url_id FROM deliveries
	WHERE campaign = $1 AND processor = $2 AND state = 'leased' AND lease = $3`

// leaseOrReclaim leases as leaseDeliveryIDs does, for a run that has not
// ended (endedRun): a lease of an ended run, one its ProcessBatch child
// started before it was terminated at continue-as-new, takes nothing.
// A lease that leases nothing first takes back what other runs' batches
// still hold, then leases again. The reset did that already for leases
// made before it; this is for the rest: a batch of the run's own that
// leased before the run's reset did (or while it failed), and leases by
// nodes not yet upgraded, which lease for an ended run as before. Their
// pages would wait for nobody while the processor looked dry. It never
// takes back the live run's batches (see releaseOtherRuns).
func leaseOrReclaim(ctx context.Context, tx pgx.Tx, l Lease, max int) (ids, chunks []int64, token string, err error) {
	ended, live, err := endedRun(ctx, tx, l)
	if err != nil || ended {
		return nil, nil, "", err
	}
	ids, chunks, token, err = leaseDeliveryIDs(ctx, tx, l, max)
	if err != nil || len(ids) > 0 {
		return ids, chunks, token, err
	}
	switch n, err := releaseOtherRuns(ctx, tx, l.CampaignKey, l.Processor, campaign.LeaseRun(l.ID), live); {
	case err != nil:
		return nil, nil, "", err
	case n == 0:
		return nil, nil, "", nil
	}
	return leaseDeliveryIDs(ctx, tx, l, max)
}

// leaseDeliveryIDs leases up to max pending deliveries under l, or finds
// those it holds already (a retried lease). A held lease names its batch
// by token, and says the chunk of each page when its pages are chunked;
// the other kind has no token until LeaseBatch makes one, and no chunks.
func leaseDeliveryIDs(ctx context.Context, tx pgx.Tx, l Lease, max int) (ids, chunks []int64, token string, err error) {
	if l.Held {
		return holdDeliveries(ctx, tx, l, max)
	}
	ids, token, err = markDeliveries(ctx, tx, l, max)
	return ids, nil, token, err
}

// markDeliveries leases as leaseDeliveryIDs does for a lease that marks
// its pages' rows leased (runs before processors version 4).
func markDeliveries(ctx context.Context, tx pgx.Tx, l Lease, max int) (ids []int64, token string, err error) {
	// By ids, statement by statement: joined to the CTEs in one
	// statement, the planner hashed the whole campaign's frontier and
	// deliveries at every lease (14 ms a lease at 60,000 URLs).
	ids, err = collectIDs(tx.Query(ctx, leasedIDsSQL, l.CampaignKey, l.Processor, l.ID))
	if err != nil || len(ids) > 0 {
		return ids, "", err
	}
	if ids, err = collectIDs(tx.Query(ctx, `
		SELECT url_id FROM deliveries
		WHERE campaign = $1 AND processor = $2 AND state = 'pending'
		ORDER BY url_id LIMIT $3
		FOR UPDATE SKIP LOCKED`, l.CampaignKey, l.Processor, max)); err != nil {
		return nil, "", err
	}
	_, err = tx.Exec(ctx, `
		UPDATE deliveries SET state = 'leased', attempts = attempts + 1, lease = $4
		WHERE campaign = $1 AND url_id = ANY($3) AND processor = $2`, l.CampaignKey, l.Processor, ids, l.ID)
	return ids, "", err
}

// holdDeliveries leases as leaseDeliveryIDs does for a held lease: the
// pages' deliveries rows go, and the batch's row keeps their ids. Pages
// in deliveries rows (kept by a node or run before chunks) go first;
// when none is pending, pages in chunks (holdChunks).
//
// The pages to take are an array, found once: as a subquery joined to
// the delete, they were taken again at each rescan (a lease of 3 took
// all 6), and as a CTE the planner hashed the whole table to join them
// (1.2 s for 120 leases of 500, against 0.45 s so).
func holdDeliveries(ctx context.Context, tx pgx.Tx, l Lease, max int) (ids, chunks []int64, token string, err error) {
	err = tx.QueryRow(ctx, `SELECT token, ids, chunks FROM delivery_batches WHERE campaign = $1 AND processor = $2 AND lease = $3`,
		l.CampaignKey, l.Processor, l.ID).Scan(&token, &ids, &chunks)
	if !errors.Is(err, pgx.ErrNoRows) { // found (a retried lease), or failed
		return ids, chunks, token, err
	}
	if ids, err = collectIDs(tx.Query(ctx, `
		DELETE FROM deliveries
		WHERE campaign = $1 AND processor = $2 AND state = 'pending' AND url_id = ANY(ARRAY(
			SELECT url_id FROM deliveries
			WHERE campaign = $1 AND processor = $2 AND state = 'pending'
			ORDER BY url_id LIMIT $3
			FOR UPDATE SKIP LOCKED))
		RETURNING url_id`, l.CampaignKey, l.Processor, max)); err != nil {
		return nil, nil, "", err
	}
	slices.Sort(ids)
	if len(ids) == 0 {
		if ids, chunks, err = holdChunks(ctx, tx, l, max); err != nil || len(ids) == 0 {
			return nil, nil, "", err
		}
	}
	if token, err = randomToken(); err != nil {
		return nil, nil, "", err
	}
	_, err = tx.Exec(ctx, `
		INSERT INTO delivery_batches (token, campaign, campaign_id, processor, lease, ids, chunks) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		token, l.CampaignKey, l.CampaignID, l.Processor, l.ID, ids, chunks)
	return ids, chunks, token, err
}

// leasedPages reads the pages of ids as processors get them, in id
// order: a body up to inline bytes comes with its page while the bodies
// so far stay within batchBytes; any other goes by its token. Pages in
// chunks are read from them (chunks[i] the chunk of ids[i]).
func leasedPages(ctx context.Context, tx pgx.Tx, campaignKey int64, ids, chunks []int64, inline, batchBytes int64) ([]LeasedPage, error) {
	if chunks != nil {
		return chunkedPages(ctx, tx, campaignKey, ids, chunks, inline, batchBytes)
	}
	// page_bodies alone (see migration 0014): the frontier only for a body
	// kept before it carried URL and depth.
	rows, err := tx.Query(ctx, `
		SELECT b.url_id, coalesce(b.url, (SELECT url FROM frontier WHERE id = b.url_id)),
		       coalesce(b.depth, (SELECT depth FROM frontier WHERE id = b.url_id)),
		       b.final_url, b.status, b.headers, coalesce(b.content_type, ''), b.fetched_at,
		       length(b.body), CASE WHEN length(b.body) <= $3 THEN b.body END, b.token, b.sha256
		FROM page_bodies b
		WHERE b.url_id = ANY($2) AND b.campaign = $1
		ORDER BY b.url_id`, campaignKey, ids, inline)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []LeasedPage
	budget := batchBytes
	for rows.Next() {
		var p LeasedPage
		var headers []byte
		if err := rows.Scan(&p.ID, &p.URL, &p.Depth, &p.FinalURL, &p.Status, &headers, &p.ContentType, &p.FetchedAt,
			&p.Length, &p.Body, &p.Token, &p.SHA256); err != nil {
			return nil, err
		}
		p.Header = headers
		if p.Body != nil && int64(len(p.Body)) <= budget {
			budget -= int64(len(p.Body))
		} else {
			p.Body = nil
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// randomToken is 16 random bytes in hex: a name nobody can guess.
func randomToken() (string, error) {
	var tok [16]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(tok[:]), nil
}

// bodyToken names a kept body: its page's id in 16 hex digits, which a
// node looks the body up by, and 16 random bytes nobody can guess. A
// token that carries no id (written before migration 0016) is looked up
// by the token alone.
func bodyToken(id int64) (string, error) {
	secret, err := randomToken()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%016x", uint64(id)) + secret, nil
}

// bodyTokenLen is the length of a token bodyToken makes, and
// legacyToken the SQL that picks the tokens made before, which carry no
// id: the predicate of their index, page_bodies_token_legacy (migration
// 0016), written as there so that the planner uses it.
const (
	bodyTokenLen = 16 + 32
	legacyToken  = `length(token) <> 48`
)

// bodyTokenID is the page id a body token names, if it names one.
func bodyTokenID(token string) (int64, bool) {
	if len(token) != bodyTokenLen {
		return 0, false
	}
	id, err := strconv.ParseUint(token[:16], 16, 63)
	return int64(id), err == nil
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
// returned to pending by a later run) is left alone. Bodies no delivery
// waits for any more are dropped.
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
		var (
			held   map[int64]bool
			chunks []int64
			err    error
		)
		if l.Held {
			held, chunks, err = recordHeld(ctx, tx, l, firsts)
		} else {
			held, err = recordLeased(ctx, tx, l, firsts)
		}
		if err != nil {
			return err
		}
		stored = len(held)
		if stored == 0 {
			return nil
		}
		var (
			recorded, iIDs []int64
			iSeq           []int32
			iItem          []string
		)
		for _, r := range firsts {
			if !held[r.ID] {
				continue
			}
			recorded = append(recorded, r.ID)
			if r.Error == "" {
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
		if chunks != nil {
			return dropChunks(ctx, tx, l.CampaignKey, distinct(chunks))
		}
		// A body goes once no delivery of its page waits: none pending or
		// leased, none held by a batch. Only other processors' can: this
		// one's delivery of a page just recorded is done or failed (a
		// page has one delivery per processor), and no other batch of
		// this processor holds the page (that takes a reset of the lease,
		// which drops this batch and so leaves nothing recorded). So a
		// campaign with one processor drops the bodies by key: hashing
		// the pages of every batch out took 2.6 of the 5.2 ms a drop of
		// 1,000 bodies took beside 8 batches out, measured; 2.0 ms so.
		_, err = tx.Exec(ctx, `
			DELETE FROM page_bodies b
			WHERE b.url_id = ANY($2) AND b.campaign = $1
			  AND NOT EXISTS (
				SELECT 1 FROM deliveries d
				WHERE d.campaign = $1 AND d.url_id = b.url_id AND d.processor <> $3 AND d.state IN ('pending', 'leased'))
			  AND b.url_id NOT IN (
				SELECT unnest(ids) FROM delivery_batches WHERE campaign = $1 AND processor <> $3 AND ids IS NOT NULL)`,
			l.CampaignKey, recorded, l.Processor)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("store results of processor %s for campaign %d: %w", l.Processor, l.CampaignKey, err)
	}
	return stored, nil
}

// outcomeColumns are the delivery outcomes of results, as columns.
func outcomeColumns(results []Processed) (ids []int64, states []string, errs []*string, items, links []int32) {
	for i, r := range results {
		state, e := DeliveryDone, (*string)(nil)
		if r.Error != "" {
			state, e = DeliveryFailed, &results[i].Error
		}
		ids = append(ids, r.ID)
		states = append(states, state)
		errs = append(errs, e)
		items = append(items, int32(len(r.Items)))
		links = append(links, int32(r.Links))
	}
	return ids, states, errs, items, links
}

// recordLeased records the outcomes of pages whose deliveries a lease
// marked leased, and says which it held. Only deliveries still leased are
// recorded; the update locks them, so a store of the same batch beside
// this one waits, then finds them recorded.
func recordLeased(ctx context.Context, tx pgx.Tx, l Lease, results []Processed) (map[int64]bool, error) {
	ids, states, errs, items, links := outcomeColumns(results)
	rows, err := tx.Query(ctx, `
		UPDATE deliveries d SET state = r.state, error = r.err, items = CASE WHEN r.state = 'done' THEN r.items ELSE 0 END,
		       links = r.links, done_at = now()
		FROM unnest($3::bigint[], $4::text[], $5::text[], $6::int[], $7::int[]) AS r(id, state, err, items, links)
		WHERE d.campaign = $1 AND d.processor = $2 AND d.url_id = r.id AND d.state = 'leased'
		RETURNING d.url_id`,
		l.CampaignKey, l.Processor, ids, states, errs, items, links)
	if err != nil {
		return nil, err
	}
	held := map[int64]bool{}
	var id int64
	_, err = pgx.ForEachRow(rows, []any{&id}, func() error { held[id] = true; return nil })
	return held, err
}

// recordHeld records the outcomes of pages a held lease holds, and says
// which it held: the batch's row goes (a store of the same batch beside
// this one waits on it, then finds nothing), a failed page's delivery is
// kept failed with its error, and the done pages are counted in
// processed_batches. For a batch of chunked pages, it says the chunk of
// each page held too.
func recordHeld(ctx context.Context, tx pgx.Tx, l Lease, results []Processed) (map[int64]bool, []int64, error) {
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
		ids, _, errs, _, links := outcomeColumns(failed)
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
	rows, err := s.pool.Query(ctx, `
		SELECT f.id, f.url, f.depth, coalesce(b.final_url, f.url)
		FROM frontier f LEFT JOIN page_bodies b ON b.url_id = f.id
		WHERE f.campaign = $1 AND f.id = ANY($2)`, l.CampaignKey, ids)
	if err != nil {
		return nil, fmt.Errorf("pages of campaign %d: %w", l.CampaignKey, err)
	}
	out := map[int64]LeasedPage{}
	var p LeasedPage
	if _, err := pgx.ForEachRow(rows, []any{&p.ID, &p.URL, &p.Depth, &p.FinalURL}, func() error { out[p.ID] = p; return nil }); err != nil {
		return nil, fmt.Errorf("pages of campaign %d: %w", l.CampaignKey, err)
	}
	if !l.Held {
		return out, nil
	}
	// Chunked pages answered from where their chunk says.
	var held, chunks []int64
	err = s.pool.QueryRow(ctx, `SELECT ids, chunks FROM delivery_batches WHERE campaign = $1 AND processor = $2 AND lease = $3`,
		l.CampaignKey, l.Processor, l.ID).Scan(&held, &chunks)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && chunks == nil) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pages of campaign %d: %w", l.CampaignKey, err)
	}
	var theirs []int64
	for i, id := range held {
		if _, ok := out[id]; ok {
			theirs = append(theirs, chunks[i])
		}
	}
	from := chunkOf(held, chunks)
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
	// batches as leased, and the done pages of batches that held theirs
	// (see recordHeld) as done.
	rows, err := s.pool.Query(ctx, `
		SELECT processor, state, count(*), coalesce(sum(items), 0),
		       (array_agg(error ORDER BY done_at DESC) FILTER (WHERE error IS NOT NULL))[1]
		FROM deliveries WHERE campaign = $1 GROUP BY processor, state
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

// ErrNoBody is returned for a token that names no kept body.
var ErrNoBody = errors.New("no such body (its pages were all processed, or the token is wrong)")

// Body returns the body a token names, and its content type.
func (s *Store) Body(ctx context.Context, token string) ([]byte, string, error) {
	if _, ok := chunkTokenChunk(token); ok {
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
	var body []byte
	var ctype string
	q, args := `SELECT body, coalesce(content_type, '') FROM page_bodies WHERE token = $1 AND `+legacyToken, []any{token}
	if id, ok := bodyTokenID(token); ok {
		q, args = `SELECT body, coalesce(content_type, '') FROM page_bodies WHERE url_id = $2 AND token = $1`, append(args, id)
	}
	err := s.pool.QueryRow(ctx, q, args...).Scan(&body, &ctype)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, "", ErrNoBody
	}
	if err != nil {
		return nil, "", fmt.Errorf("body %s: %w", token, err)
	}
	return body, ctype, nil
}

// Bodies returns the kept bodies that tokens name, by token; a token that
// names none is left out.
func (s *Store) Bodies(ctx context.Context, tokens []string) (map[string][]byte, error) {
	out := make(map[string][]byte, len(tokens))
	chunked := map[string]chunkPage{}
	if err := chunkBodies(ctx, s.pool, tokens, chunked); err != nil {
		return nil, fmt.Errorf("bodies: %w", err)
	}
	for t, p := range chunked {
		out[t] = p.body
	}
	var ids []int64
	var keyed, legacy []string
	for _, t := range tokens {
		if _, ok := chunkTokenChunk(t); ok {
			continue
		}
		if id, ok := bodyTokenID(t); ok {
			ids, keyed = append(ids, id), append(keyed, t)
		} else {
			legacy = append(legacy, t)
		}
	}
	// Each keyed token is looked up by its page; the legacy ones by the
	// index that only they are in (migration 0016).
	rows, err := s.pool.Query(ctx, `
		SELECT b.token, b.body FROM unnest($1::bigint[], $2::text[]) AS t(id, token)
		JOIN page_bodies b ON b.url_id = t.id AND b.token = t.token
		UNION ALL
		SELECT token, body FROM page_bodies WHERE token = ANY($3) AND `+legacyToken, ids, keyed, legacy)
	if err != nil {
		return nil, fmt.Errorf("bodies: %w", err)
	}
	var token string
	var body []byte
	_, err = pgx.ForEachRow(rows, []any{&token, &body}, func() error {
		out[token] = body
		body = nil
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("bodies: %w", err)
	}
	return out, nil
}

// collectIDs reads a column of ids.
func collectIDs(rows pgx.Rows, err error) ([]int64, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

// PageKey is a page's idempotency key for processors: the campaign ID and
// the page's frontier row, which never changes.
func PageKey(campaignID string, id int64) string { return campaignID + "/" + strconv.FormatInt(id, 10) }

// DropBatch forgets a batch's token once its outcome is stored.
func (s *Store) DropBatch(ctx context.Context, token string) error {
	if _, err := s.pool.Exec(ctx, `DELETE FROM delivery_batches WHERE token = $1`, token); err != nil {
		return fmt.Errorf("drop batch %s: %w", token, err)
	}
	return nil
}
