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

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/crawl"
	"github.com/spiderpool/spiderpool/fetch"
	"github.com/spiderpool/spiderpool/store"
)

// Fetch runs fetch batches on one node.
type Fetch struct {
	node    string
	store   *store.Store
	fetcher *fetch.Fetcher
	log     *slog.Logger
	slots   chan struct{} // node-wide cap on simultaneous requests
	gates   *hostGates
	rules   *rulesCache
}

// NewFetch returns the fetch activities of node, making at most concurrency
// requests at once.
func NewFetch(node string, st *store.Store, f *fetch.Fetcher, concurrency int, log *slog.Logger) *Fetch {
	return &Fetch{
		node: node, store: st, fetcher: f, log: log.With("node", node),
		slots: make(chan struct{}, concurrency),
		gates: newHostGates(),
		rules: &rulesCache{store: st, byKey: map[int64]*rules{}},
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
	o     store.Outcome
	links []store.NewURL
	bytes int64
}

// FetchBatch fetches the batch's URLs that are still leased to it, commits
// results in chunks and heartbeats its progress. A retried attempt, or the
// batch rerouted to another node, claims only what is still unsettled, so
// it resumes where the last holder stopped.
func (f *Fetch) FetchBatch(ctx context.Context, req campaign.FetchBatchRequest) (campaign.BatchResult, error) {
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
	claimed, err := f.store.Claim(ctx, req.CampaignKey, req.LeaseID, req.IDs, holder, f.node, ttl)
	if err != nil {
		return campaign.BatchResult{}, batchFailed(err, progress)
	}
	progress.Skipped += len(req.IDs) - len(claimed)
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
	started := make([]bool, len(claimed))
	var wg sync.WaitGroup
	for i, c := range claimed {
		wg.Add(1)
		go func() {
			defer wg.Done()
			gate := f.gates.get(req.CampaignKey, c.ShardKey, r.spec.Politeness)
			if !gate.acquire(stop) {
				return
			}
			defer gate.release()
			select {
			case f.slots <- struct{}{}:
			case <-stop:
				return
			}
			defer func() { <-f.slots }()
			mu.Lock()
			started[i] = true
			mu.Unlock()
			o := f.fetchOne(ctx, r, c)
			if ctx.Err() != nil && o.o.State == store.Pending {
				// Cut off by cancellation, not by the host: hand it back
				// as unfetched rather than charge an attempt.
				mu.Lock()
				started[i] = false
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

	var unstarted []int64
	for i, c := range claimed {
		if !started[i] {
			unstarted = append(unstarted, c.ID)
		}
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
	outs := make([]store.Outcome, len(chunk))
	var links []store.NewURL
	for i, o := range chunk {
		outs[i] = o.o
		links = append(links, o.links...)
	}
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
	var r campaign.BatchResult
	r.Discovered = res.Discovered
	for _, o := range chunk {
		if !res.Accepted[o.o.ID] {
			r.Skipped++ // another holder took it over
			continue
		}
		r.Bytes += o.bytes
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

// fetchOne fetches one URL and decides its outcome and discovered links.
func (f *Fetch) fetchOne(ctx context.Context, r *rules, c store.ClaimedURL) outcome {
	spec := &r.spec
	resp := f.fetcher.Get(ctx, c.URL, fetch.Options{
		UserAgent:      spec.Politeness.UserAgent,
		ConnectTimeout: spec.Timeouts.Connect.D(),
		RequestTimeout: spec.Timeouts.Request.D(),
		MaxBodyBytes:   spec.Limits.MaxBodyBytes,
		KeepBody:       true,
	})
	out := outcome{o: store.Outcome{ID: c.ID, Attempted: true, Status: resp.Status}, bytes: resp.Length}
	switch fetch.Classify(&resp, spec.Retry.NonRetryableStatuses) {
	case fetch.Transient:
		attempt := c.Attempts + 1
		out.o.Error = fetch.Describe(&resp)
		if attempt < spec.Retry.MaxAttempts {
			out.o.State = store.Pending
			out.o.RetryIn = backoff(spec.Retry, attempt)
		} else {
			out.o.State = store.Failed
			out.o.Error = fmt.Sprintf("%s (after %d attempts)", out.o.Error, attempt)
		}
		return out
	case fetch.Final:
		out.o.State, out.o.Error = store.Failed, fetch.Describe(&resp)
		return out
	}
	out.o.State = store.Fetched
	page := &store.Page{
		Status: resp.Status, ContentType: resp.ContentType, ContentLength: resp.Length, Truncated: resp.Truncated,
		Digest: resp.Digest, FetchedAt: time.Now(), Duration: resp.Duration,
	}
	out.o.Page = page
	self, err := crawl.Canonicalize(c.URL)
	if err != nil {
		return out // stored canonical URLs always parse; nothing to follow if not
	}
	if resp.Status >= 300 && resp.Status < 400 && resp.Location != "" {
		target, err := crawl.Resolve(self, resp.Location)
		if err != nil {
			page.RedirectTo = "invalid: " + resp.Location
			return out
		}
		page.RedirectTo = target.String
		// A redirect is not a link hop: same depth, one more redirect.
		if link, ok := r.admit(target, resp.Location, c.Depth, c.Redirects+1, c.ID); ok {
			out.links = append(out.links, link)
		}
		return out
	}
	if !resp.IsHTML() || len(resp.Body) == 0 {
		return out
	}
	doc := crawl.ExtractLinks(resp.Body, spec.Limits.MaxLinksPerPage)
	page.Title, page.Links = doc.Title, len(doc.Links)
	if doc.NoFollow {
		return out
	}
	base := self
	if doc.Base != "" {
		if b, err := crawl.Resolve(self, doc.Base); err == nil {
			base = b
		}
	}
	seen := make(map[uint64]bool, len(doc.Links))
	for _, href := range doc.Links {
		u, err := crawl.Resolve(base, href)
		if err != nil {
			continue
		}
		fp := u.Fingerprint()
		if seen[fp] || u.String == self.String {
			continue
		}
		seen[fp] = true
		if link, ok := r.admit(u, href, c.Depth+1, 0, c.ID); ok {
			out.links = append(out.links, link)
		}
	}
	return out
}

// backoff is the wait before attempt+1: initial × coefficient^(attempt-1),
// capped.
func backoff(p campaign.Retry, attempt int) time.Duration {
	d := float64(p.InitialInterval.D()) * math.Pow(p.BackoffCoefficient, float64(attempt-1))
	return time.Duration(math.Min(d, float64(p.MaxInterval.D())))
}

// rules is a campaign's compiled spec, cached per node.
type rules struct {
	spec    campaign.Spec
	scope   *crawl.Scope
	shardBy crawl.ShardBy
	loaded  time.Time
}

// admit turns a discovered URL into a frontier row if the scope takes it.
func (r *rules) admit(u crawl.URL, raw string, depth, redirects int, parent int64) (store.NewURL, bool) {
	if r.scope.Check(u, depth) != crawl.InScope {
		return store.NewURL{}, false
	}
	link := store.NewURL{
		Fingerprint: u.Fingerprint(), URL: u.String, FoundAs: raw, ShardKey: crawl.ShardKey(u, r.shardBy),
		Depth: depth, Redirects: redirects, ParentID: parent,
	}
	if redirects > r.spec.Limits.MaxRedirects {
		link.ExcludedBecause = fmt.Sprintf("redirect chain longer than limits.max_redirects (%d)", r.spec.Limits.MaxRedirects)
	}
	return link, true
}

type rulesCache struct {
	store *store.Store
	mu    sync.Mutex
	byKey map[int64]*rules
}

// get returns the campaign's rules, reloading them after a minute so a
// campaign restarted with a new spec is picked up.
func (c *rulesCache) get(ctx context.Context, key int64) (*rules, error) {
	c.mu.Lock()
	r, ok := c.byKey[key]
	c.mu.Unlock()
	if ok && time.Since(r.loaded) < time.Minute {
		return r, nil
	}
	spec, err := c.store.CampaignSpec(ctx, key)
	if err != nil {
		return nil, err
	}
	scope, err := spec.CompileScope()
	if err != nil {
		return nil, err
	}
	r = &rules{spec: spec, scope: scope, shardBy: crawl.ShardBy(spec.Scope.ShardBy), loaded: time.Now()}
	c.mu.Lock()
	c.byKey[key] = r
	c.mu.Unlock()
	return r, nil
}

// hostGates enforce per-host concurrency and minimum delay on this node.
type hostGates struct {
	mu    sync.Mutex
	gates map[gateKey]*gate
}

type gateKey struct {
	campaign int64
	shard    string
}

type gate struct {
	slots chan struct{}
	delay time.Duration
	mu    sync.Mutex
	next  time.Time // earliest start of the next request
}

func newHostGates() *hostGates { return &hostGates{gates: map[gateKey]*gate{}} }

func (h *hostGates) get(campaignKey int64, shard string, p campaign.Politeness) *gate {
	h.mu.Lock()
	defer h.mu.Unlock()
	k := gateKey{campaignKey, shard}
	g, ok := h.gates[k]
	if !ok || cap(g.slots) != p.MaxConcurrencyPerHost || g.delay != p.MinDelay.D() {
		if len(h.gates) > 50_000 {
			h.pruneLocked()
		}
		g = &gate{slots: make(chan struct{}, p.MaxConcurrencyPerHost), delay: p.MinDelay.D()}
		h.gates[k] = g
	}
	return g
}

// pruneLocked drops idle gates so a broad crawl does not grow the map
// without bound.
func (h *hostGates) pruneLocked() {
	now := time.Now()
	for k, g := range h.gates {
		g.mu.Lock()
		idle := len(g.slots) == 0 && g.next.Before(now)
		g.mu.Unlock()
		if idle {
			delete(h.gates, k)
		}
	}
}

// acquire takes a slot and waits out the host's delay; false if stopped.
func (g *gate) acquire(stop <-chan struct{}) bool {
	select {
	case g.slots <- struct{}{}:
	case <-stop:
		return false
	}
	if g.delay <= 0 {
		return true
	}
	g.mu.Lock()
	now := time.Now()
	start := g.next
	if start.Before(now) {
		start = now
	}
	g.next = start.Add(g.delay)
	g.mu.Unlock()
	if wait := time.Until(start); wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-stop:
			<-g.slots
			return false
		}
	}
	return true
}

func (g *gate) release() { <-g.slots }
