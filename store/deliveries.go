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

// Delivering pages to processors, in four steps, each in files of its
// own:
//
//   - a commit keeps the pages it records in chunks, with each processor's
//     share of them (bodies.go, chunks.go, chunkformat.go);
//   - a lease takes a batch of a processor's pages out of their chunks'
//     deliveries into the batch's delivery_batches row (this file), and a
//     node serves the batch and its bodies by token;
//   - the batch's outcome is stored: items, failed pages, and the chunks
//     nobody has pages of left dropped (processed.go);
//   - a run's first lease, or a failed child, puts back what batches of
//     ended runs hold (processorruns.go).
//
// A page a processor wants is so pending in its chunk's deliveries
// (chunks.go), leased while a batch holds it in its delivery_batches row,
// then done (counted in processed_batches) or failed (a deliveries row,
// with the error).

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
	// Rendered: a browser rendered the page (campaign.ProcessPage).
	Rendered bool
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
