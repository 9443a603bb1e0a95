package crawler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/spiderpool/spiderpool/admission"
	"github.com/spiderpool/spiderpool/archive"
	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/fetch"
	"github.com/spiderpool/spiderpool/metrics"
	"github.com/spiderpool/spiderpool/store"
)

// Fetch is a node's crawler: the engine that runs the batches its puller
// takes from Postgres (see Take and Puller).
//
// A batch holds no worker slot while its URLs wait for their hosts. The
// engine keeps one queue per host, shared by every campaign on the node,
// and one goroutine per host with work, which takes URLs from each
// campaign's queue in turn as the host's pace allows; requests run under a
// node-wide cap shared fairly among campaigns. How many hosts a node
// crawls at once is bounded only by what the campaigns' windows send it.
//
// Results are committed per campaign in chunks. A batch ends once all its
// URLs are settled, and its end, with what it did, goes to
// FetchOptions.Done.
type Fetch struct {
	node     string
	holder   string
	live     *Liveness
	store    *store.Store
	fetcher  *fetch.Fetcher // robots.txt and sitemaps
	pages    PageFetcher
	log      *slog.Logger
	slots    *fairSlots
	hosts    *hostTable
	robots   *robotsCache
	sitemaps firsts
	queries  admission.QueryCounts // query URLs per host this node admitted (see admission.QueryCounter)
	rules    *rulesCache
	metrics  *metrics.Crawl
	archive  *archive.Writer
	done     func(store.DoneBatch)
	// commits records what the engine settles; ownCommits: the engine made
	// it (a process of one engine), and closes it as it stops.
	commits    *Commits
	ownCommits bool

	mu       sync.Mutex
	batches  map[*batch]struct{}
	held     map[int64]*item // URLs this node holds, by ID
	queues   map[string]*hostQueue
	stopping bool
	// allSettled is closed, once Stop made it, when no batch is left
	// and none is still being completed (completing).
	allSettled chan struct{}
	completing int

	life  context.Context // the engine's, until Stop returns
	end   context.CancelFunc
	work  sync.WaitGroup // host goroutines and requests
	loops sync.WaitGroup
}

// PageFetcher fetches one page for the engine. The engine does everything
// around it: the host's pace and claim (Reached in the options says when
// the request was answered, which anchors the host's next turn), robots.txt,
// conditional headers, the archive, links and the commit. Plain HTTP
// (*fetch.Fetcher) is the default; another kind of fetcher (a browser)
// plugs in here alone.
type PageFetcher interface {
	Get(ctx context.Context, url string, o fetch.Options) fetch.Response
}

// FetchOptions are a node's fetch settings beyond its identity.
type FetchOptions struct {
	// Pages fetches the pages; nil fetches them with the engine's HTTP
	// fetcher, which also fetches robots.txt and sitemaps.
	Pages PageFetcher
	// Concurrency caps the node's simultaneous requests.
	Concurrency int
	// Holder is this process's token on the frontier rows it claims
	// (store.HolderToken); the node's registry heartbeat keeps it alive.
	Holder string
	// Live says how long the heartbeat keeps Holder alive: the engine
	// sends no request for a URL claimed under a token that may have
	// lapsed since. Nil: always alive.
	Live *Liveness
	// Metrics records crawl metrics; nil records none.
	Metrics *metrics.Crawl
	// Archive receives every fetched page as WARC records before it is
	// committed; nil writes none.
	Archive *archive.Writer
	// Done receives each batch the node took from Postgres (see Take) once
	// it is over, with what it did; the Puller reports them.
	Done func(store.DoneBatch)
	// Commits records what the engine settles, shared by the engines of a
	// process; nil gives the engine its own.
	Commits *Commits
}

// NewFetch returns the engine of node. Start runs it; Stop hands back what
// it has not started and ends its batches.
func NewFetch(node string, st *store.Store, f *fetch.Fetcher, o FetchOptions, log *slog.Logger) *Fetch {
	log = log.With("node", node)
	slots := newFairSlots(o.Concurrency)
	life, end := context.WithCancel(context.Background())
	commits, own := o.Commits, o.Commits == nil
	if own {
		commits = NewCommits(st, o.Metrics, log)
	}
	return &Fetch{
		node: node, holder: o.Holder, live: o.Live, store: st, fetcher: f, pages: cmp.Or[PageFetcher](o.Pages, f), log: log,
		commits: commits, ownCommits: own,
		slots:   slots,
		hosts:   newHostTable(o.Holder, st, log),
		robots:  newRobotsCache(st, f, slots, log),
		rules:   &rulesCache{store: st, byKey: map[int64]*rules{}},
		metrics: o.Metrics,
		archive: o.Archive,
		done:    o.Done,
		batches: map[*batch]struct{}{},
		held:    map[int64]*item{},
		queues:  map[string]*hostQueue{},
		life:    life, end: end,
	}
}

// Start runs the engine's host claim renewal. The policy listener is the
// process's, shared by its node identities: see WatchPolicies.
func (f *Fetch) Start() {
	f.loop(f.hosts.keep)
}

// WatchPolicies re-reads the engines' host policies every time a campaign
// starts or ends, until ctx ends: one listener per process, however many
// node identities it runs. News that comes while the policies are being
// read folds into one more read: a crawl reaching many hosts announces
// each batch of them. Through a transaction pooler (PgBouncer) the
// listener hears nothing, and the policies are re-read as claims renew.
func WatchPolicies(ctx context.Context, st *store.Store, engines []*Fetch) {
	changed := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		st.ListenPolicies(ctx, func() {
			select {
			case changed <- struct{}{}:
			default:
			}
		})
	}()
	for {
		select {
		case <-ctx.Done():
			<-done
			return
		case <-changed:
			for _, f := range engines {
				f.hosts.refreshPolicies(ctx)
			}
		}
	}
}

func (f *Fetch) loop(fn func(context.Context)) {
	f.loops.Add(1)
	go func() { defer f.loops.Done(); fn(f.life) }()
}

// Stop stops taking turns: what has not started goes back to pending,
// requests in flight finish and are committed, and every batch ends with
// what it did. It gives up waiting when ctx ends.
func (f *Fetch) Stop(ctx context.Context) error {
	f.mu.Lock()
	f.stopping = true
	var stopped []*item
	for b := range f.batches {
		stopped = append(stopped, f.stopLocked(b)...)
	}
	f.mu.Unlock()
	f.handBack(stopped)
	err := waitFor(ctx, &f.work, "requests in flight")
	f.commits.kick()
	err = errors.Join(err, f.waitSettled(ctx))
	f.hosts.letGoAll(ctx)
	if f.ownCommits {
		err = errors.Join(err, f.commits.Close(ctx))
	}
	f.end()
	f.loops.Wait()
	return err
}

// waitSettled waits, as the engine stops, until every batch is settled
// and committed.
func (f *Fetch) waitSettled(ctx context.Context) error {
	f.mu.Lock()
	if f.allSettled == nil {
		f.allSettled = make(chan struct{})
		if len(f.batches) == 0 && f.completing == 0 {
			close(f.allSettled)
		}
	}
	all := f.allSettled
	f.mu.Unlock()
	select {
	case <-all:
		return nil
	case <-ctx.Done():
		return errors.New("stopped waiting for commits")
	}
}

func waitFor(ctx context.Context, wg *sync.WaitGroup, what string) error {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return errors.New("stopped waiting for " + what)
	}
}

// batch is one batch the engine runs.
type batch struct {
	key   int64 // campaign
	req   campaign.FetchBatchRequest
	gen   uint64 // the holder token's generation it was claimed in (Liveness)
	ended func(outcome string)

	// Guarded by Fetch.mu.
	items     []*item
	remaining int // URLs not yet settled and committed
	result    campaign.BatchResult
	stop      chan struct{} // closed when its URLs take no more turns
	stopped   bool
	cancelled bool
}

// item is one claimed URL on its way through the engine.
type item struct {
	url   store.ClaimedURL
	batch *batch
	rules *rules
	host  *host
	// history is what earlier runs of the campaign's series saw of the
	// URL: nil when it has no series, the URL is new to it, or the
	// history could not be read (it is then fetched unconditionally).
	history *store.URLHistory
	// Guarded by Fetch.mu.
	started bool // taken off its queue by its host's goroutine
	gone    bool // handed back from the queue
}

// Take runs a batch the node took from Postgres (node_batches): it claims
// the batch's URLs still leased and not held by a live node (a batch
// delivered twice, or rerouted while its first node lives, claims nothing
// twice) and hands them to the engine; the batch's end, with what it did,
// goes to FetchOptions.Done. An error means nothing was claimed: the
// caller may try again.
func (f *Fetch) Take(ctx context.Context, req campaign.FetchBatchRequest) error {
	res, pending, err := f.accept(ctx, req)
	if err != nil {
		return err
	}
	if !pending {
		f.finishTaken(req, res)
	}
	return nil
}

// finishTaken hands a taken batch's end to the node's reporter.
func (f *Fetch) finishTaken(req campaign.FetchBatchRequest, res campaign.BatchResult) {
	if f.done != nil {
		f.done(store.DoneBatch{Batch: req.Batch, CampaignKey: req.CampaignKey, Node: f.node, Result: res})
	}
}

// StopCampaign stops the engine's batches of a campaign that is no longer
// running (cancelled, say): what has not started goes back, what runs
// finishes, and each batch ends.
func (f *Fetch) StopCampaign(key int64) {
	f.mu.Lock()
	var stopped []*item
	for b := range f.batches {
		if b.key == key {
			b.cancelled = true
			stopped = append(stopped, f.stopLocked(b)...)
		}
	}
	f.mu.Unlock()
	f.handBack(stopped)
}

// Campaigns lists the campaigns the engine holds URLs of.
func (f *Fetch) Campaigns() []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var keys []int64
	for b := range f.batches {
		if !slices.Contains(keys, b.key) {
			keys = append(keys, b.key)
		}
	}
	return keys
}

// accept claims and queues a batch; pending is false when there is
// nothing to wait for, and res is then the batch's result.
func (f *Fetch) accept(ctx context.Context, req campaign.FetchBatchRequest) (res campaign.BatchResult, pending bool, err error) {
	r, err := f.rules.get(ctx, req.CampaignKey)
	if err != nil {
		return res, false, err
	}
	gen := f.live.generation() // before the claim: a lapse during it makes the claim suspect
	claimed, err := f.store.Claim(ctx, req.CampaignKey, req.LeaseID, req.IDs, f.holder, f.node, r.spec.Dispatch.LeaseTTL.D())
	if err != nil {
		return res, false, fmt.Errorf("claim batch %d of campaign %d: %w", req.Batch, req.CampaignKey, err)
	}
	for _, c := range claimed {
		f.metrics.LeaseAge(c.LeaseAge)
	}
	b := &batch{key: req.CampaignKey, req: req, gen: gen, ended: f.metrics.BatchStarted(), stop: make(chan struct{})}
	b.result.Skipped = len(req.IDs) - len(claimed)
	// URLs the claim failed (nodes kept dying holding them) are settled.
	claimed = slices.DeleteFunc(claimed, func(c store.ClaimedURL) bool { return c.Failed != "" })
	b.result.Failed = len(req.IDs) - b.result.Skipped - len(claimed)
	f.metrics.Settled("failed", b.result.Failed)
	histories := f.histories(ctx, r, claimed)
	var start []*hostQueue
	var hosts []*host
	f.mu.Lock()
	if f.stopping {
		// Back, unfetched: what this claim took, not what the node already
		// had from an earlier delivery, which is on its way and settles.
		var back []int64
		for _, c := range claimed {
			if _, held := f.held[c.ID]; !held {
				back = append(back, c.ID)
			}
		}
		f.mu.Unlock()
		n, err := f.store.Release(context.WithoutCancel(ctx), req.CampaignKey, req.LeaseID, back, f.holder)
		b.ended("cancelled")
		b.result.Skipped += len(claimed) - len(back)
		b.result.Released = n
		return b.result, false, err
	}
	for _, c := range claimed {
		if _, dup := f.held[c.ID]; dup { // delivered before: its first copy settles it
			b.result.Skipped++
			continue
		}
		q := f.queueLocked(c.ShardKey)
		it := &item{url: c, batch: b, rules: r, host: q.host, history: histories[c.ID]}
		f.held[c.ID] = it
		b.items = append(b.items, it)
		b.remaining++
		q.push(it)
		q.host.enter(b.key, r.spec.Politeness.MinDelay.D(), r.spec.Politeness.MaxConcurrencyPerHost)
		hosts = append(hosts, q.host)
		if !q.running {
			q.running = true
			start = append(start, q)
		}
	}
	if b.remaining == 0 {
		f.mu.Unlock()
		b.ended("completed")
		return b.result, false, nil
	}
	f.batches[b] = struct{}{}
	f.mu.Unlock()
	f.hosts.claimAll(ctx, hosts)
	for _, q := range start {
		f.work.Add(1)
		go f.runHost(q)
	}
	if d := req.HandBackAfter.D(); d > 0 {
		time.AfterFunc(d, func() {
			f.mu.Lock()
			stopped := f.stopLocked(b)
			f.mu.Unlock()
			f.handBack(stopped)
		})
	}
	return campaign.BatchResult{}, true, nil
}

// stopLocked stops a batch taking turns and returns its URLs still queued,
// to hand back: when it is cancelled, at its hand-back time, or when the
// node stops. URLs already on their way finish.
func (f *Fetch) stopLocked(b *batch) []*item {
	if b.stopped {
		return nil
	}
	b.stopped = true
	close(b.stop)
	var queued []*item
	for _, it := range b.items {
		if !it.started && !it.gone {
			it.gone = true
			queued = append(queued, it)
		}
	}
	return queued
}

// handBack sends URLs the node will not fetch back to pending.
func (f *Fetch) handBack(items []*item) {
	for _, it := range items {
		f.settle(it, outcome{}, true)
	}
}

// hostQueue is a host's URLs waiting on this node, per campaign, taken in
// turn from each campaign. Guarded by Fetch.mu.
type hostQueue struct {
	host       *host
	byCampaign map[int64][]*item
	order      []int64 // campaigns with URLs queued, in turn order
	running    bool    // its goroutine is running
}

func (f *Fetch) queueLocked(shard string) *hostQueue {
	q, ok := f.queues[shard]
	if !ok {
		q = &hostQueue{host: f.hosts.get(shard), byCampaign: map[int64][]*item{}}
		f.queues[shard] = q
	}
	return q
}

func (q *hostQueue) push(it *item) {
	k := it.batch.key
	items := q.byCampaign[k]
	if len(items) == 0 {
		q.order = append(q.order, k)
	}
	// In batch order, whatever order the batches were claimed in (a
	// process claims several at once): a node's batches share their
	// hosts, and end in turn only if each host runs them in turn.
	i := len(items)
	for i > 0 && items[i-1].batch.req.Batch > it.batch.req.Batch {
		i--
	}
	q.byCampaign[k] = slices.Insert(items, i, it)
}

// pop takes the next URL, from the next campaign in turn; nil when none
// is left.
func (q *hostQueue) pop() *item {
	for len(q.order) > 0 {
		k := q.order[0]
		q.order = q.order[1:]
		items := q.byCampaign[k]
		for len(items) > 0 && items[0].gone {
			items = items[1:]
		}
		if len(items) == 0 {
			delete(q.byCampaign, k)
			continue
		}
		it := items[0]
		if items = items[1:]; len(items) > 0 {
			q.byCampaign[k] = items
			q.order = append(q.order, k)
		} else {
			delete(q.byCampaign, k)
		}
		return it
	}
	return nil
}

// runHost works through a host's queue, one turn at a time, until it is
// empty.
func (f *Fetch) runHost(q *hostQueue) {
	defer f.work.Done()
	h := q.host
	for {
		f.mu.Lock()
		it := q.pop()
		if it == nil {
			q.running = false
			if len(q.byCampaign) == 0 {
				delete(f.queues, h.key)
			}
			f.mu.Unlock()
			return
		}
		it.started = true
		f.mu.Unlock()
		f.process(h, it)
		if h.yieldDue() {
			h.yieldWhenIdle(f.life)
		}
	}
}

// process takes one URL through robots.txt and its host's turn, then sends
// its request on its way; its outcome is settled when it is known.
func (f *Fetch) process(h *host, it *item) {
	ctx := f.life
	out, request, ok := f.check(ctx, it, h)
	switch {
	case !ok:
		f.settle(it, outcome{}, true)
		return
	case !request:
		f.settle(it, out, false)
		return
	}
	key, stop := it.batch.key, it.batch.stop
	waitFrom := time.Now()
	if !h.turn(ctx, stop, func() bool { return f.slots.take(key, stop) }, func() { f.slots.give(key) }) {
		f.settle(it, outcome{}, true)
		return
	}
	if !f.live.holds(it.batch.gen, time.Now()) {
		// The token it was claimed under may have lapsed: the URL may be
		// another node's now. Back, unsent (Release keeps it only if it
		// is still this process's).
		h.reached(time.Time{})
		f.slots.give(key)
		h.done()
		f.settle(it, outcome{}, true)
		return
	}
	f.metrics.HostWait(time.Since(waitFrom))
	f.work.Add(1)
	go func() {
		defer f.work.Done()
		f.settle(it, f.request(ctx, it, h, out), false)
	}()
}

// settle hands a URL's outcome (or, with back, the URL itself, unfetched)
// to its campaign's committer.
func (f *Fetch) settle(it *item, out outcome, back bool) {
	near := it.host.gap() < soonBelow // while the campaign's pace still counts
	soon := it.host.leave(f.life, it.batch.key) && near
	f.commits.add(settlement{f: f, it: it, out: out, back: back, soon: soon})
}

// soonBelow is the host spacing under which a host's last URL on the
// engine is committed within flushSoon: its next URLs must be committed,
// leased, taken and claimed before its next turn. A host further apart
// leaves the commit time to gather others (a crawl of many hosts 5 s
// apart settles every URL as its host's last).
const soonBelow = 2 * time.Second

// settled books what a chunk's commit kept into the chunk's batches, and
// completes those with nothing left.
func (f *Fetch) settled(chunk []settlement, res []campaign.BatchResult) {
	var done []*batch
	f.mu.Lock()
	for i, s := range chunk {
		b := s.it.batch
		delete(f.held, s.it.url.ID)
		b.result.Add(res[i])
		if b.remaining--; b.remaining == 0 {
			delete(f.batches, b)
			done = append(done, b)
		}
	}
	f.completing += len(done)
	f.mu.Unlock()
	for _, b := range done {
		f.complete(b)
	}
	// Only once every finished batch is handed to the puller may Stop stop
	// waiting.
	f.mu.Lock()
	f.completing -= len(done)
	if f.allSettled != nil && len(f.batches) == 0 && f.completing == 0 {
		select {
		case <-f.allSettled:
		default:
			close(f.allSettled)
		}
	}
	f.mu.Unlock()
}

// complete ends a finished batch: its end goes to the node's reporter.
func (f *Fetch) complete(b *batch) {
	f.mu.Lock()
	res, cancelled := b.result, b.cancelled
	f.mu.Unlock()
	outcome := "completed"
	if cancelled {
		outcome = "cancelled"
	}
	b.ended(outcome)
	f.finishTaken(b.req, res)
}
