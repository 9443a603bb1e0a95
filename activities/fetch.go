package activities

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/spiderpool/spiderpool/archive"
	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/fetch"
	"github.com/spiderpool/spiderpool/metrics"
	"github.com/spiderpool/spiderpool/store"
)

// Fetch runs fetch batches on one node.
type Fetch struct {
	node    string
	store   *store.Store
	fetcher *fetch.Fetcher
	log     *slog.Logger
	slots   chan struct{} // node-wide cap on simultaneous requests
	polite  *politeness
	robots  *robotsCache
	queries *queryCaps
	seen    *seenCache
	rules   *rulesCache
	metrics *metrics.Crawl
	archive *archive.Writer
}

// FetchOptions are a node's fetch settings beyond its identity.
type FetchOptions struct {
	// Concurrency caps the node's simultaneous requests.
	Concurrency int
	// Metrics records crawl metrics; nil records none.
	Metrics *metrics.Crawl
	// Archive receives every fetched page as WARC records before it is
	// committed; nil writes none.
	Archive *archive.Writer
}

// NewFetch returns the fetch activities of node.
func NewFetch(node string, st *store.Store, f *fetch.Fetcher, o FetchOptions, log *slog.Logger) *Fetch {
	log = log.With("node", node)
	slots := make(chan struct{}, max(1, o.Concurrency))
	return &Fetch{
		node: node, store: st, fetcher: f, log: log,
		slots:   slots,
		polite:  newPoliteness(node, st, log),
		robots:  newRobotsCache(st, f, slots, log),
		queries: &queryCaps{seen: map[gateKey]map[uint64]struct{}{}},
		seen:    newSeenCache(),
		rules:   &rulesCache{store: st, byKey: map[int64]*rules{}},
		metrics: o.Metrics,
		archive: o.Archive,
	}
}

// Register names the activity as in package campaign.
func (f *Fetch) Register(r interface {
	RegisterActivityWithOptions(any, activity.RegisterOptions)
}) {
	r.RegisterActivityWithOptions(f.FetchBatch, activity.RegisterOptions{Name: campaign.FetchBatchActivity})
}

const (
	flushEvery    = 64
	flushInterval = 250 * time.Millisecond
	commitRetries = 8
)

// outcome is one URL's result before it is committed.
type outcome struct {
	o              store.Outcome
	links          []store.NewURL
	bytes          int64
	sitemapURLs    int // new URLs its host's sitemaps added
	requestMs      int64
	transportError bool // no answer: counts against the node's health
	// exchange is the fetch to archive, when the node archives and the
	// page ended fetched.
	exchange *archive.Exchange
}

// FetchBatch fetches the batch's URLs that are still leased to it, commits
// results in chunks and heartbeats its progress. A retried attempt, or the
// batch rerouted to another node, claims only what is still unsettled, so
// it resumes where the last holder stopped.
func (f *Fetch) FetchBatch(ctx context.Context, req campaign.FetchBatchRequest) (res campaign.BatchResult, err error) {
	ended := f.metrics.BatchStarted()
	defer func() {
		var canceled *temporal.CanceledError
		switch {
		case err == nil:
			ended("completed")
		case errors.As(err, &canceled):
			ended("cancelled")
		default:
			ended("failed")
		}
	}()
	info := activity.GetInfo(ctx)
	log := f.log.With("campaign", req.CampaignID, "lease", req.LeaseID, "route", req.Route, "attempt", req.Attempt)
	r, err := f.rules.get(ctx, req.CampaignKey)
	if err != nil {
		return campaign.BatchResult{}, err
	}
	var progress campaign.BatchResult
	if activity.HasHeartbeatDetails(ctx) {
		_ = activity.GetHeartbeatDetails(ctx, &progress) // counts of earlier attempts
	}
	holder := fmt.Sprintf("%s/r%d/a%d.%d", f.node, req.Route, req.Attempt, info.Attempt)
	ttl := r.spec.Dispatch.LeaseTTL.D()
	holderTTL := r.spec.Dispatch.HeartbeatTimeout.D() / 2
	claimed, err := f.store.Claim(ctx, req.CampaignKey, req.LeaseID, req.IDs, holder, f.node, ttl, holderTTL)
	if err != nil {
		return campaign.BatchResult{}, batchFailed(err, progress)
	}
	// Keep this batch alive in Postgres while it runs, whatever Temporal
	// says: a batch cut off from Temporal but not from Postgres finishes
	// its URLs, and the rerouted copy finds nothing to take from it.
	holderCtx, stopHolder := context.WithCancel(context.WithoutCancel(ctx))
	holderDone := make(chan struct{})
	go func() {
		defer close(holderDone)
		t := time.NewTicker(holderTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-holderCtx.Done():
				return
			case <-t.C:
				if err := f.store.RenewHolder(holderCtx, holder, holderTTL); err != nil && holderCtx.Err() == nil {
					log.Warn("renew batch holder", "error", err)
				}
			}
		}
	}()
	defer func() {
		stopHolder()
		<-holderDone
		if err := f.store.DropHolder(context.WithoutCancel(ctx), holder); err != nil {
			log.Warn("drop batch holder", "error", err)
		}
	}()
	progress.Skipped += len(req.IDs) - len(claimed)
	for _, c := range claimed {
		f.metrics.LeaseAge(c.LeaseAge)
	}
	var mu sync.Mutex // guards progress against the heartbeat loop
	snapshot := func() campaign.BatchResult { mu.Lock(); defer mu.Unlock(); return progress }

	hbCtx, stopHeartbeat := context.WithCancel(ctx)
	defer stopHeartbeat()
	go heartbeatLoop(ctx, hbCtx.Done(), info.HeartbeatTimeout, snapshot)

	// Stopping (worker shutdown) lets requests in flight finish and hands
	// the rest back to pending; cancellation does the same without waiting.
	stop := make(chan struct{})
	var stopOnce sync.Once
	halt := func() { stopOnce.Do(func() { close(stop) }) }
	go func() {
		select {
		case <-activity.GetWorkerStopChannel(ctx):
			halt()
		case <-ctx.Done():
			halt()
		case <-hbCtx.Done():
		}
	}()

	results := make(chan outcome, flushEvery)
	var unstarted []int64 // guarded by mu
	var wg sync.WaitGroup
	for _, c := range claimed {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g := f.polite.gate(req.CampaignKey, c.ShardKey, &r.spec)
			g.enter()
			defer g.leave(ctx)
			o, ok := f.fetchOne(ctx, r, req.CampaignKey, c, g, stop)
			if !ok || (ctx.Err() != nil && o.o.State == store.Pending) {
				// Stopped before its turn, or cut off by cancellation and
				// not by the host: hand it back unfetched, no attempt
				// charged.
				mu.Lock()
				unstarted = append(unstarted, c.ID)
				mu.Unlock()
				return
			}
			results <- o
		}()
	}
	go func() { wg.Wait(); close(results) }()

	var pending []outcome
	commit := func() error {
		if len(pending) == 0 {
			return nil
		}
		got, err := f.commit(ctx, req.CampaignKey, holder, pending)
		if err != nil {
			return err
		}
		mu.Lock()
		progress.Add(got)
		mu.Unlock()
		pending = pending[:0]
		return nil
	}
	ticker := time.NewTicker(flushInterval)
	defer ticker.Stop()
	lastExtend := time.Now()
	var commitErr error
	for done := false; !done; {
		select {
		case o, ok := <-results:
			if !ok {
				done = true
				break
			}
			pending = append(pending, o)
			if len(pending) >= flushEvery {
				commitErr = errors.Join(commitErr, commit())
			}
		case <-ticker.C:
			commitErr = errors.Join(commitErr, commit())
			// Extending here, between commits, keeps the batch's own
			// writes to its rows in one sequence: no self-deadlock.
			if time.Since(lastExtend) > ttl/4 {
				if err := f.store.ExtendLease(ctx, req.LeaseID, holder, ttl); err != nil && ctx.Err() == nil {
					log.Warn("extend lease", "error", err)
				} else {
					lastExtend = time.Now()
				}
			}
		}
	}
	if err := commit(); err != nil || commitErr != nil {
		// Committed chunks stay committed; a retry claims and fetches the
		// rest. Only the chunk that failed is fetched again.
		log.Warn("commit failed; the batch will be retried", "error", errors.Join(commitErr, err))
		return campaign.BatchResult{}, batchFailed(errors.Join(commitErr, err), snapshot())
	}

	if len(unstarted) > 0 {
		n, err := f.store.Release(context.WithoutCancel(ctx), req.CampaignKey, req.LeaseID, unstarted, holder)
		if err != nil {
			return campaign.BatchResult{}, batchFailed(err, snapshot())
		}
		mu.Lock()
		progress.Released += n
		mu.Unlock()
		log.Info("node stopping: handed unfetched URLs back", "urls", n)
	}
	if ctx.Err() != nil {
		return campaign.BatchResult{}, temporal.NewCanceledError(snapshot())
	}
	return snapshot(), nil
}

// batchFailed carries what the batch did settle, so the workflow's
// counters stay right when it retries the batch.
func batchFailed(err error, progress campaign.BatchResult) error {
	return temporal.NewApplicationErrorWithCause(err.Error(), "BatchFailed", err, progress)
}

// commit records a chunk, retrying while Postgres is briefly away (a
// restart): the fetches are already paid for.
func (f *Fetch) commit(ctx context.Context, key int64, holder string, chunk []outcome) (campaign.BatchResult, error) {
	// Archived before committed: a crash between the two refetches the
	// page (and archives it again) rather than leaving a page fetched in
	// Postgres with no record of it. A failed write fails the chunk,
	// which stays leased and is fetched again.
	if err := f.archiveChunk(chunk); err != nil {
		return campaign.BatchResult{}, err
	}
	outs := make([]store.Outcome, len(chunk))
	var found []store.NewURL
	for i, o := range chunk {
		outs[i] = o.o
		found = append(found, o.links...)
	}
	seen := f.seen.table(key)
	links := seen.unseen(found)
	var (
		res store.CommitResult
		err error
	)
	cctx := context.WithoutCancel(ctx) // finish what was fetched even if cancelled
	for attempt := range commitRetries {
		if res, err = f.store.Commit(cctx, key, holder, f.node, outs, links); err == nil {
			break
		}
		f.log.Warn("commit failed, retrying", "error", err, "attempt", attempt+1)
		time.Sleep(time.Duration(math.Min(float64(time.Second)*math.Pow(2, float64(attempt)), float64(8*time.Second))))
	}
	if err != nil {
		return campaign.BatchResult{}, err
	}
	for _, l := range found { // all in the frontier now, inserted or not
		seen.add(l.Fingerprint)
	}
	var r campaign.BatchResult
	r.Discovered = res.Discovered
	f.metrics.Discovered(res.Discovered)
	defer func() {
		f.metrics.Settled("fetched", r.Fetched)
		f.metrics.Settled("failed", r.Failed)
		f.metrics.Settled("excluded", r.Excluded)
		f.metrics.Settled("retry", r.Retried)
	}()
	for _, o := range chunk {
		r.Discovered += o.sitemapURLs
		if !res.Accepted[o.o.ID] {
			r.Skipped++ // another holder took it over
			continue
		}
		r.Bytes += o.bytes
		if o.o.Attempted {
			r.Requests++
			r.RequestMillis += o.requestMs
			if o.transportError {
				r.TransportErrors++
			}
		}
		switch o.o.State {
		case store.Fetched:
			r.Fetched++
		case store.Failed:
			r.Failed++
		case store.Excluded:
			r.Excluded++
		case store.Pending:
			r.Retried++
		}
	}
	return r, nil
}

// archiveChunk writes the chunk's fetched pages to the node's WARC files.
func (f *Fetch) archiveChunk(chunk []outcome) error {
	if f.archive == nil {
		return nil
	}
	for i := range chunk {
		if ex := chunk[i].exchange; ex != nil {
			if err := f.archive.Write(*ex); err != nil {
				return err
			}
			chunk[i].exchange = nil // written: a retried commit does not write it again
		}
	}
	return nil
}

// heartbeatLoop reports progress at a third of the heartbeat timeout, on
// its own goroutine so a slow commit never looks like a dead node.
func heartbeatLoop(ctx context.Context, done <-chan struct{}, timeout time.Duration, snapshot func() campaign.BatchResult) {
	every := timeout / 3
	if every <= 0 {
		every = 3 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		// No heartbeat at once: a short batch would finish while it is on
		// the wire. The activity's own context, not a child: the SDK sends
		// throttled heartbeats later and must see the activity's state.
		select {
		case <-done:
			return
		case <-t.C:
		}
		activity.RecordHeartbeat(ctx, snapshot())
	}
}
