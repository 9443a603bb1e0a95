package activities

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/fetch"
	"github.com/spiderpool/spiderpool/store"
)

// politeness holds this node's gates: one per campaign and shard key.
//
// A gate fetches only while it holds its host's claim in Postgres, so one
// node at a time fetches from a host: max concurrency holds across the
// cluster, and the minimum delay too, because each claim starts no earlier
// than the host's next_allowed_at, which every holder keeps up to date.
// A node that dies stops renewing and its claim lapses after claimTTL.
type politeness struct {
	node string
	st   *store.Store
	log  *slog.Logger

	mu    sync.Mutex
	gates map[gateKey]*gate
}

type gateKey struct {
	campaign int64
	shard    string
}

func newPoliteness(node string, st *store.Store, log *slog.Logger) *politeness {
	return &politeness{node: node, st: st, log: log, gates: map[gateKey]*gate{}}
}

const (
	minBackoff = 250 * time.Millisecond // first extra delay after a 5xx
	maxBackoff = 10 * time.Second       // most extra delay 5xx answers earn
)

// gate returns the host's gate, created on first use. The spec's
// concurrency and delay apply; robots.txt may raise the delay later.
func (p *politeness) gate(campaignKey int64, shard string, spec *campaign.Spec) *gate {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := gateKey{campaignKey, shard}
	g, ok := p.gates[k]
	if ok && cap(g.slots) == spec.Politeness.MaxConcurrencyPerHost {
		return g
	}
	if len(p.gates) > 50_000 {
		p.pruneLocked()
	}
	g = &gate{
		p: p, key: k,
		slots:    make(chan struct{}, spec.Politeness.MaxConcurrencyPerHost),
		minDelay: spec.Politeness.MinDelay.D(),
		claimTTL: spec.Dispatch.HeartbeatTimeout.D(),
	}
	g.delay = g.minDelay
	p.gates[k] = g
	return g
}

// pruneLocked drops gates nobody uses, so a broad crawl does not grow the
// map without bound.
func (p *politeness) pruneLocked() {
	for k, g := range p.gates {
		g.mu.Lock()
		idle := g.users == 0
		g.mu.Unlock()
		if idle {
			delete(p.gates, k)
		}
	}
}

// gate paces the requests of one host on this node.
type gate struct {
	p        *politeness
	key      gateKey
	slots    chan struct{}
	minDelay time.Duration
	claimTTL time.Duration

	mu      sync.Mutex
	delay   time.Duration // max(min_delay, robots.txt Crawl-delay)
	extra   time.Duration // learned from 5xx answers
	errRate float64       // moving average of server errors among answers
	answers int           // answers seen, for errRate to mean something
	slowed  time.Time     // when extra last grew
	next    time.Time     // earliest start of the next request
	last    time.Time     // start of the latest request
	users   int           // URLs between enter and leave
	claimed bool
	renewed time.Time

	claimMu sync.Mutex // one claim operation at a time
}

// enter counts a URL that will use the gate; leave must follow.
func (g *gate) enter() {
	g.mu.Lock()
	g.users++
	g.mu.Unlock()
}

// leave undoes enter; the last one out releases the claim, recording when
// the host's next request may start.
func (g *gate) leave(ctx context.Context) {
	g.mu.Lock()
	g.users--
	last := g.users == 0 && g.claimed
	g.mu.Unlock()
	if !last {
		return
	}
	g.claimMu.Lock()
	defer g.claimMu.Unlock()
	g.mu.Lock()
	if g.users > 0 || !g.claimed { // someone came back meanwhile
		g.mu.Unlock()
		return
	}
	g.claimed = false
	nextIn, extra := time.Until(g.next), g.extra
	g.mu.Unlock()
	if err := g.p.st.ReleaseHost(context.WithoutCancel(ctx), g.key.campaign, g.key.shard, g.p.node, nextIn, extra); err != nil {
		g.p.log.Warn("release host claim", "host", g.key.shard, "error", err)
	}
}

// setCrawlDelay applies a robots.txt Crawl-delay (already capped): it can
// only slow the host below min_delay's pace, never speed it. It counts from
// the latest request, which may be the robots.txt fetch that told it.
func (g *gate) setCrawlDelay(d time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.delay = max(g.minDelay, d); !g.last.IsZero() {
		if n := g.last.Add(spacing(g.delay, g.extra)); n.After(g.next) {
			g.next = n
		}
	}
}

// spacing is the least time between two starts: the delay with a margin
// of 3% and 10 ms, so the host sees at least the delay between arrivals
// whatever the jitter of connection set-up and scheduling on a busy node.
func spacing(delay, extra time.Duration) time.Duration {
	d := delay + extra
	if d <= 0 {
		return 0
	}
	return d + d*3/100 + 10*time.Millisecond
}

// turn waits for the host's claim, a concurrency slot and the host's delay,
// then for a node-wide slot (take and give, from the caller), and only
// then takes its start, so time spent waiting for the node never shortens
// the gap the host sees. It returns false, holding nothing, if stop closed
// first; after a true, the caller holds a node slot and must call done.
//
// A start is taken only when it is due, not reserved ahead: if the host's
// pace changes while a request waits (a Retry-After, errors that clear), the
// wait follows it.
func (g *gate) turn(ctx context.Context, stop <-chan struct{}, take func() bool, give func()) bool {
	if !g.claim(ctx, stop) {
		return false
	}
	select {
	case g.slots <- struct{}{}:
	case <-stop:
		return false
	}
	for {
		g.mu.Lock()
		wait := time.Until(g.next)
		g.mu.Unlock()
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-stop:
				t.Stop()
				<-g.slots
				return false
			}
		}
		if !take() {
			<-g.slots
			return false
		}
		g.mu.Lock()
		now := time.Now()
		if g.next.After(now) { // another request of this host started meanwhile
			g.mu.Unlock()
			give()
			continue
		}
		gap := spacing(g.delay, g.extra)
		g.next, g.last = now.Add(gap), now
		renew := time.Since(g.renewed) > g.claimTTL/3 || gap >= g.claimTTL/2
		g.mu.Unlock()
		// A long delay is written down before the request, so a node that
		// takes over after this one dies still keeps it.
		if renew {
			if !g.renew(ctx) {
				give()
				<-g.slots
				return g.turn(ctx, stop, take, give) // the claim was lost: wait for it again
			}
			// The request goes out now, after the renew's round trip: the
			// next start counts from here, and so does what release or the
			// next renew writes for a node that takes the host over.
			g.mu.Lock()
			now := time.Now()
			if next := now.Add(gap); next.After(g.next) {
				g.next = next
			}
			g.last = now
			g.mu.Unlock()
		}
		return true
	}
}

// done ends a turn.
func (g *gate) done() { <-g.slots }

// claim makes sure this node holds the host's claim, waiting while another
// node holds it.
func (g *gate) claim(ctx context.Context, stop <-chan struct{}) bool {
	backoff := 50 * time.Millisecond
	for {
		g.claimMu.Lock()
		g.mu.Lock()
		held := g.claimed
		g.mu.Unlock()
		if held {
			g.claimMu.Unlock()
			return true
		}
		c, err := g.p.st.ClaimHost(ctx, g.key.campaign, g.key.shard, g.p.node, g.claimTTL)
		if err == nil && c.Granted {
			g.mu.Lock()
			g.claimed, g.renewed = true, time.Now()
			if at := time.Now().Add(c.Wait); at.After(g.next) {
				g.next = at
			}
			g.extra = c.ExtraDelay
			g.mu.Unlock()
			g.claimMu.Unlock()
			return true
		}
		g.claimMu.Unlock()
		if err != nil {
			g.p.log.Warn("claim host", "host", g.key.shard, "error", err)
		}
		select {
		case <-stop:
			return false
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// renew extends the claim and records the host's next start; false if the
// claim was lost (this node was too slow to renew and another took over).
func (g *gate) renew(ctx context.Context) bool {
	g.claimMu.Lock()
	defer g.claimMu.Unlock()
	g.mu.Lock()
	if !g.claimed {
		g.mu.Unlock()
		return false
	}
	nextIn, extra := time.Until(g.next), g.extra
	g.mu.Unlock()
	ok, err := g.p.st.RenewHost(ctx, g.key.campaign, g.key.shard, g.p.node, g.claimTTL, nextIn, extra)
	if err != nil {
		g.p.log.Warn("renew host claim", "host", g.key.shard, "error", err)
		return true // keep going on the claim we have; it lapses if this persists
	}
	g.mu.Lock()
	g.claimed = ok
	if ok {
		g.renewed = time.Now()
	}
	g.mu.Unlock()
	return ok
}

// Adaptive slowing: once errMinAnswers answers are in, a moving average of
// server errors (weight errAlpha per answer) above errSlow doubles the
// extra delay, at most once per second or per extra delay, whichever is
// longer, so one burst of concurrent answers counts once; below errFast
// it halves. A few failing pages do not slow a healthy host; a struggling
// host is given room.
const (
	errAlpha      = 0.2
	errSlow       = 0.5
	errFast       = 0.2
	errMinAnswers = 8
)

// observe adapts the host's pace to an answer: a Retry-After (429, 503) or
// a bare 429 pauses it, a run of server errors slows it, success speeds it
// back up. A pause is written to Postgres at once, so leasing skips the
// host and any node that takes it over waits too.
func (g *gate) observe(ctx context.Context, r *fetch.Response, maxRetryAfter time.Duration) {
	g.mu.Lock()
	var pause time.Duration
	serverError := r.Status >= 500 || r.Status == http.StatusTooManyRequests || (r.Status == 0 && r.Err != nil)
	g.errRate = (1-errAlpha)*g.errRate + errAlpha*boolFloat(serverError)
	g.answers++

	switch {
	case r.RetryAfter > 0 && (r.Status == http.StatusTooManyRequests || r.Status == http.StatusServiceUnavailable):
		pause = min(r.RetryAfter, maxRetryAfter)
	case r.Status == http.StatusTooManyRequests:
		pause = min(max(time.Second, g.extra), maxRetryAfter)
	}
	switch {
	case serverError && g.errRate > errSlow && g.answers >= errMinAnswers && time.Since(g.slowed) > max(time.Second, g.extra):
		g.extra = min(max(2*g.extra, minBackoff), maxBackoff)
		g.slowed = time.Now()
	case g.errRate < errFast:
		if g.extra /= 2; g.extra < 50*time.Millisecond {
			g.extra = 0
		}
	}
	if pause > 0 {
		if at := time.Now().Add(pause); at.After(g.next) {
			g.next = at
		}
	}
	g.mu.Unlock()
	if pause > 0 {
		if err := g.p.st.CoolHost(ctx, g.key.campaign, g.key.shard, pause); err != nil {
			g.p.log.Warn("pause host", "host", g.key.shard, "error", err)
		}
	}
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
