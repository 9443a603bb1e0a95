package activities

import (
	"context"
	"sync"
	"time"

	"github.com/spiderpool/spiderpool/archive"
	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/crawl"
	"github.com/spiderpool/spiderpool/store"
)

const (
	flushEvery    = 64
	flushInterval = 250 * time.Millisecond
	// committerIdle is how long a campaign's committer waits with nothing
	// to do before it goes.
	committerIdle = time.Minute
)

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

// settlement is a URL leaving the engine: its outcome, or (back) the URL
// itself, handed back unfetched.
type settlement struct {
	it   *item
	out  outcome
	back bool
}

// committer records one campaign's settlements in chunks: links first,
// then outcomes and page records, and hand-backs. Postgres being away
// (a restart, an outage) only makes it wait and try again: the fetches are
// paid for, and the batches heartbeat meanwhile.
type committer struct {
	f    *Fetch
	key  int64
	wake chan struct{}

	mu      sync.Mutex
	pending []settlement
}

func (c *committer) add(s settlement) {
	c.mu.Lock()
	c.pending = append(c.pending, s)
	full := len(c.pending) >= flushEvery
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

func (c *committer) take() []settlement {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.pending
	c.pending = nil
	return out
}

func (c *committer) run() {
	f := c.f
	defer f.commits.Done()
	tick := time.NewTicker(flushInterval)
	defer tick.Stop()
	idleSince := time.Now()
	for {
		select {
		case <-c.wake:
		case <-tick.C:
		}
		if chunk := c.take(); len(chunk) > 0 {
			c.flush(chunk)
			idleSince = time.Now()
			continue
		}
		// Gone when idle, and at once when the node stops and nothing of
		// the campaign is left to settle.
		f.mu.Lock()
		c.mu.Lock()
		quiet := len(c.pending) == 0 && !f.holdsLocked(c.key)
		stop := quiet && (f.stopping || time.Since(idleSince) > committerIdle)
		if stop {
			delete(f.committers, c.key)
		}
		c.mu.Unlock()
		f.mu.Unlock()
		if stop {
			return
		}
	}
}

// holdsLocked says whether the node still holds URLs of a campaign.
func (f *Fetch) holdsLocked(key int64) bool {
	for b := range f.batches {
		if b.key == key {
			return true
		}
	}
	return false
}

// flush records a chunk and books it into its batches. It tries again
// until Postgres takes it, or the node is past stopping.
func (c *committer) flush(chunk []settlement) {
	f := c.f
	c.archive(chunk)
	n := 0
	for _, s := range chunk {
		n += len(s.out.links)
	}
	// Sized once: grown by append, the links of a chunk (hundreds of
	// pages of about 20 each) were copied again at every doubling: the
	// line took 0.98 s of the 12.6 s of CPU that 3 nodes spent in a
	// profile of a 60,000-page crawl.
	outs := make([]store.Outcome, 0, len(chunk))
	found := make([]store.NewURL, 0, n)
	back := map[int64][]int64{} // lease -> IDs handed back
	for _, s := range chunk {
		if s.back {
			back[s.it.batch.req.LeaseID] = append(back[s.it.batch.req.LeaseID], s.it.url.ID)
			continue
		}
		outs = append(outs, s.out.o)
		found = append(found, s.out.links...)
	}
	seen := f.seen.table(c.key)
	links := seen.unseen(found)
	var committed store.CommitResult
	released := map[int64]bool{}
	ctx := context.WithoutCancel(f.life)
	c.retry("commit", func() error {
		var err error
		if len(outs) > 0 && committed.Accepted == nil {
			if committed, err = f.store.Commit(ctx, c.key, f.holder, f.node, outs, links); err != nil {
				return err
			}
			for _, l := range found { // all in the frontier now, inserted or not
				seen.add(l)
			}
		}
		for lease, ids := range back {
			if _, err := f.store.Release(ctx, c.key, lease, ids, f.holder); err != nil {
				return err
			}
			for _, id := range ids {
				released[id] = true
			}
			delete(back, lease)
		}
		return nil
	})
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
	c.recordVisits(ctx, chunk, committed.Accepted)
	var total campaign.BatchResult
	for _, r := range res {
		total.Add(r)
	}
	f.metrics.Discovered(committed.Discovered)
	f.metrics.Settled("fetched", total.Fetched)
	f.metrics.Settled("failed", total.Failed)
	f.metrics.Settled("excluded", total.Excluded)
	f.metrics.Settled("retry", total.Retried)
	f.settled(chunk, res)
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
		return c.f.store.RecordVisits(ctx, rec.Series, rec.MinInterval.D(), rec.MaxInterval.D(), visits)
	})
}

// retry runs fn until it succeeds, waiting longer each time up to 8 s; it
// gives up only once the node has stopped its engine (see Stop).
func (c *committer) retry(what string, fn func() error) {
	wait := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil {
			return
		}
		if c.f.life.Err() != nil {
			c.f.log.Warn(what+" failed; the node is stopping, its URLs will be fetched again", "campaign_key", c.key, "error", err)
			return
		}
		c.f.log.Warn(what+" failed, retrying", "campaign_key", c.key, "attempt", attempt, "error", err)
		select {
		case <-c.f.life.Done():
		case <-time.After(wait):
		}
		wait = min(2*wait, 8*time.Second)
	}
}

// archive writes the chunk's fetched pages to the node's WARC files before
// they are committed: a crash between the two refetches the page (and
// archives it again) rather than leaving a page fetched in Postgres with
// no record of it. A page whose record cannot be written is handed back,
// to be fetched again.
func (c *committer) archive(chunk []settlement) {
	if c.f.archive == nil {
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
	for k, err := range c.f.archiveExchanges(context.WithoutCancel(c.f.life), r, exs) {
		if err != nil {
			c.f.log.Warn("archive page; it will be fetched again", "url", exs[k].URL, "error", err)
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
