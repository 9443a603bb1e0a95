package crawler

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/spiderpool/spiderpool/archive"
	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/crawl"
	"github.com/spiderpool/spiderpool/metrics"
	"github.com/spiderpool/spiderpool/retry"
	"github.com/spiderpool/spiderpool/store"
)

const (
	// A committer writes its pending settlements once flushEvery of them
	// wait, one of them is a hand-back, or the oldest has waited
	// flushAfter (below): a polite crawl settles a few URLs a second per
	// host and node, and writing them every flushInterval cost a pool of
	// 48 nodes 8,800 commits of 4 pages each for 40,000 pages.
	flushEvery    = 64
	flushInterval = 200 * time.Millisecond
	// flushSoon is how long a settlement that left its host with nothing
	// queued on its engine waits for others: the host's next URLs (the
	// page's links, the next lease's refill, which counts what is
	// committed) and the campaign's end wait for that commit.
	flushSoon = 50 * time.Millisecond
	// committerIdle is how long a campaign's committer waits with nothing
	// to do before it goes.
	committerIdle = time.Minute
)

// flushAfter is how long the oldest pending settlement may wait (a var
// only for tests).
var flushAfter = 600 * time.Millisecond

// outcome is one URL's result before it is committed.
type outcome struct {
	o store.Outcome
	// self is the URL as it is requested (see linked), once check has
	// parsed it.
	self           crawl.URL
	links          []store.NewURL
	bytes          int64
	sitemapURLs    int // new URLs its host's sitemaps added
	requestMs      int64
	transportError bool // no answer: counts against the node's health
	// exchange is the fetch to archive, when the node archives and the
	// page ended fetched.
	exchange *archive.Exchange
	// visit is what the fetch adds to the URL's history, in a campaign
	// of a recurring series.
	visit *store.Visit
}

// settlement is a URL leaving an engine: its outcome, or (back) the URL
// itself, handed back unfetched.
type settlement struct {
	f    *Fetch // the engine (node identity) that held it
	it   *item
	out  outcome
	back bool
	// soon: it was its host's last URL on the engine, and the host's next
	// turn is under soonBelow away (flushSoon).
	soon bool
}

// Commits records what a process's engines settle, per campaign, in
// chunks, whichever of the process's node identities (worker --replicas)
// holds each URL: a thousand identities fetching a page a second each
// commit together, in a few transactions a second, not a thousand. Each
// outcome is recorded for its own holder, so a URL another holder took
// over is still not recorded twice. One per process; an engine built
// without one has its own.
type Commits struct {
	store   *store.Store
	log     *slog.Logger
	metrics *metrics.Crawl
	// seen remembers links already in the frontier, for the process.
	seen *seenCache

	mu         sync.Mutex
	committers map[int64]*committer
	closing    bool           // Close was called: committers go once they hold nothing
	running    sync.WaitGroup // committers
	// life ends when Close gives up waiting: a commit still failing then
	// is abandoned (its URLs are fetched again).
	life context.Context
	end  context.CancelFunc
}

// NewCommits returns the commits of a process's engines; Close ends them.
func NewCommits(st *store.Store, m *metrics.Crawl, log *slog.Logger) *Commits {
	life, end := context.WithCancel(context.Background())
	return &Commits{store: st, log: log, metrics: m, seen: newSeenCache(),
		committers: map[int64]*committer{}, life: life, end: end}
}

// Close waits for the committers to write what they hold (until ctx
// ends), then stops them: call it once every engine has stopped.
func (h *Commits) Close(ctx context.Context) error {
	h.mu.Lock()
	h.closing = true
	h.mu.Unlock()
	h.kick()
	done := make(chan struct{})
	go func() { h.running.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		h.end()
		<-done
		return errors.New("stopped waiting for commits")
	}
	h.end()
	return nil
}

// add hands a settlement to its campaign's committer.
func (h *Commits) add(s settlement) {
	key := s.it.batch.key
	h.mu.Lock()
	c, ok := h.committers[key]
	if !ok {
		c = &committer{h: h, key: key, wake: make(chan struct{}, 1)}
		h.committers[key] = c
		h.running.Add(1)
		go c.run()
	}
	h.mu.Unlock()
	c.add(s)
}

// kick makes every committer write what it holds now.
func (h *Commits) kick() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.committers {
		c.kick()
	}
}

// committer records one campaign's settlements in chunks: links first,
// then outcomes and page records, and hand-backs. Postgres being away
// (a restart, an outage) only makes it wait and try again: the fetches are
// paid for, and the batches wait for their commit to end.
type committer struct {
	h    *Commits
	key  int64
	wake chan struct{}

	mu      sync.Mutex
	pending []settlement
	since   time.Time   // when the oldest pending settlement came
	soon    *time.Timer // kicks flushSoon after a host's last URL came
}

func (c *committer) add(s settlement) {
	c.mu.Lock()
	if len(c.pending) == 0 {
		c.since = time.Now()
	}
	c.pending = append(c.pending, s)
	full := len(c.pending) >= flushEvery
	if s.soon && c.soon == nil {
		c.soon = time.AfterFunc(flushSoon, c.kick)
	}
	c.mu.Unlock()
	if full || s.back {
		c.kick()
	}
}

func (c *committer) kick() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// take takes the pending settlements when they are due: forced (a kick:
// full, a hand-back, the process closing), or the oldest old enough.
func (c *committer) take(forced bool) []settlement {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !forced && time.Since(c.since) < flushAfter {
		return nil
	}
	if c.soon != nil {
		c.soon.Stop()
		c.soon = nil
	}
	out := c.pending
	c.pending = nil
	return out
}

func (c *committer) run() {
	h := c.h
	defer h.running.Done()
	tick := time.NewTicker(flushInterval)
	defer tick.Stop()
	idleSince := time.Now()
	for {
		forced := true
		select {
		case <-c.wake:
		case <-tick.C:
			forced = false
		case <-h.life.Done():
		}
		h.mu.Lock()
		forced = forced || h.closing
		h.mu.Unlock()
		if chunk := c.take(forced); len(chunk) > 0 {
			c.flush(chunk)
			idleSince = time.Now()
			continue
		}
		// Gone when idle for a while, or once the process closes the
		// commits: the next settlement of the campaign starts another.
		h.mu.Lock()
		c.mu.Lock()
		stop := len(c.pending) == 0 && (h.closing || h.life.Err() != nil || time.Since(idleSince) > committerIdle)
		if stop {
			delete(h.committers, c.key)
		}
		c.mu.Unlock()
		h.mu.Unlock()
		if stop {
			return
		}
	}
}

// releaseKey groups the URLs a chunk hands back.
type releaseKey struct {
	holder string
	lease  int64
}

// flush records a chunk and books it into its batches. It tries again
// until Postgres takes it, or the process has closed its commits.
func (c *committer) flush(chunk []settlement) {
	c.archive(chunk)
	p := gather(chunk)
	ctx := context.WithoutCancel(c.h.life)
	committed, released := c.record(ctx, p)
	res := results(chunk, committed, released)
	c.recordVisits(ctx, chunk, committed.Accepted)
	c.count(committed, res)
	bookByEngine(chunk, res)
}

// gathered is what a chunk asks of Postgres: outcomes and the links they
// found, and the URLs handed back, by holder and lease.
type gathered struct {
	outs  []store.Outcome
	found []store.NewURL
	back  map[releaseKey][]int64
}

func gather(chunk []settlement) gathered {
	n := 0
	for _, s := range chunk {
		n += len(s.out.links)
	}
	// Sized once: grown by append, the links of a chunk (hundreds of
	// pages of about 20 each) were copied again at every doubling: the
	// line took 0.98 s of the 12.6 s of CPU that 3 nodes spent in a
	// profile of a 60,000-page crawl.
	p := gathered{
		outs: make([]store.Outcome, 0, len(chunk)), found: make([]store.NewURL, 0, n),
		back: map[releaseKey][]int64{},
	}
	for _, s := range chunk {
		if s.back {
			k := releaseKey{s.f.holder, s.it.batch.req.LeaseID}
			p.back[k] = append(p.back[k], s.it.url.ID)
			continue
		}
		o := s.out.o
		o.Holder, o.Node = s.f.holder, s.f.node
		p.outs = append(p.outs, o)
		p.found = append(p.found, s.out.links...)
	}
	return p
}

// record commits the chunk's outcomes and new links, then releases what
// was handed back, trying again until Postgres takes each; it returns the
// commit and the URLs released.
func (c *committer) record(ctx context.Context, p gathered) (store.CommitResult, map[int64]bool) {
	h := c.h
	seen := h.seen.table(c.key)
	links := seen.unseen(p.found)
	var committed store.CommitResult
	released := map[int64]bool{}
	c.retry("commit", func() error {
		var err error
		if len(p.outs) > 0 && committed.Accepted == nil {
			if committed, err = h.store.Commit(ctx, c.key, "", "", p.outs, links); err != nil {
				return err
			}
			for _, l := range p.found { // all in the frontier now, inserted or not
				seen.add(l)
			}
		}
		for k, ids := range p.back {
			if _, err := h.store.Release(ctx, c.key, k.lease, ids, k.holder); err != nil {
				return err
			}
			for _, id := range ids {
				released[id] = true
			}
			delete(p.back, k)
		}
		return nil
	})
	return committed, released
}

// results is what each settlement of the chunk did, as its batch counts
// it; the links the commit discovered go to the first page's.
func results(chunk []settlement, committed store.CommitResult, released map[int64]bool) []campaign.BatchResult {
	res := make([]campaign.BatchResult, len(chunk))
	discovered := false
	for i, s := range chunk {
		r := &res[i]
		if s.back {
			if released[s.it.url.ID] {
				r.Released++
			}
			continue
		}
		if !discovered && committed.Discovered > 0 {
			r.Discovered, discovered = committed.Discovered, true
		}
		tally(r, s.out, committed.Accepted[s.out.o.ID])
	}
	return res
}

// count adds the chunk to the node's metrics.
func (c *committer) count(committed store.CommitResult, res []campaign.BatchResult) {
	var total campaign.BatchResult
	for _, r := range res {
		total.Add(r)
	}
	m := c.h.metrics
	m.Discovered(committed.Discovered)
	m.Settled("fetched", total.Fetched)
	m.Settled("failed", total.Failed)
	m.Settled("excluded", total.Excluded)
	m.Settled("retry", total.Retried)
}

// bookByEngine hands each engine of the process its part of the chunk.
func bookByEngine(chunk []settlement, res []campaign.BatchResult) {
	for len(chunk) > 0 {
		f := chunk[0].f
		var part []settlement
		var partRes []campaign.BatchResult
		rest, restRes := chunk[:0:0], res[:0:0]
		for i, s := range chunk {
			if s.f == f {
				part, partRes = append(part, s), append(partRes, res[i])
			} else {
				rest, restRes = append(rest, s), append(restRes, res[i])
			}
		}
		f.settled(part, partRes)
		chunk, res = rest, restRes
	}
}

// recordVisits adds the chunk's recorded fetches to their URLs' histories
// (campaigns of a recurring series), before their batches report done.
func (c *committer) recordVisits(ctx context.Context, chunk []settlement, accepted map[int64]bool) {
	var visits []store.Visit
	var rec *campaign.Recrawl
	for _, s := range chunk {
		if !s.back && s.out.visit != nil && accepted[s.out.o.ID] {
			visits = append(visits, *s.out.visit)
			rec = s.it.rules.spec.Recrawl
		}
	}
	if len(visits) == 0 || rec == nil {
		return
	}
	c.retry("history", func() error {
		return c.h.store.RecordVisits(ctx, rec.Series, rec.MinInterval.D(), rec.MaxInterval.D(), visits)
	})
}

// retry runs fn until it succeeds, waiting longer each time up to 8 s; it
// gives up only once the process has closed its commits (see Close).
func (c *committer) retry(what string, fn func() error) {
	h := c.h
	wait := retry.Backoff(250*time.Millisecond, 8*time.Second)
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil {
			return
		}
		if h.life.Err() != nil {
			h.log.Warn(what+" failed; the node is stopping, its URLs will be fetched again", "campaign_key", c.key, "error", err)
			return
		}
		h.log.Warn(what+" failed, retrying", "campaign_key", c.key, "attempt", attempt, "error", err)
		retry.Sleep(h.life.Done(), wait)
	}
}

// archive writes the chunk's fetched pages to the node's WARC files before
// they are committed: a crash between the two refetches the page (and
// archives it again) rather than leaving a page fetched in Postgres with
// no record of it. A page whose record cannot be written is handed back,
// to be fetched again.
func (c *committer) archive(chunk []settlement) {
	if len(chunk) == 0 || chunk[0].f.archive == nil { // a process's engines share its archive
		return
	}
	var at []int
	var exs []archive.Exchange
	var r *rules
	for i := range chunk {
		s := &chunk[i]
		if s.back || s.out.exchange == nil {
			continue
		}
		at, exs, r = append(at, i), append(exs, *s.out.exchange), s.it.rules
		s.out.exchange = nil
	}
	if len(exs) == 0 {
		return
	}
	for k, err := range chunk[at[0]].f.archiveExchanges(context.WithoutCancel(c.h.life), r, exs) {
		if err != nil {
			c.h.log.Warn("archive page; it will be fetched again", "url", exs[k].URL, "error", err)
			chunk[at[k]].back = true
		}
	}
}

// tally counts one URL's outcome into a batch result.
func tally(r *campaign.BatchResult, o outcome, accepted bool) {
	r.Discovered += o.sitemapURLs
	if !accepted {
		r.Skipped++ // another holder took it over
		return
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
