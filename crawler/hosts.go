package crawler

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/spiderpool/spiderpool/fetch"
	"github.com/spiderpool/spiderpool/politeness"
	"github.com/spiderpool/spiderpool/retry"
	"github.com/spiderpool/spiderpool/store"
)

// hostTable is this node's hosts, one per shard key, shared by every
// campaign whose URLs the node holds: politeness belongs to the host.
//
// A host fetches only while this node holds its claim in Postgres, so one
// node at a time fetches from it, for all campaigns: max concurrency holds
// across the cluster, and the delay too, because each claim starts no
// earlier than the host's next_allowed_at, which holders keep current. The
// delay and concurrency are the strictest among the running campaigns that
// crawl the host (store.HostPolicies), whichever node they run on. A node
// that dies stops renewing and its claims lapse after claimTTL.
type hostTable struct {
	holder   string
	st       *store.Store
	log      *slog.Logger
	claimTTL time.Duration

	mu    sync.Mutex
	hosts map[string]*host
}

// claimTTL is how long a host claim lives without renewal: the time a
// dead node keeps its hosts from the others.
const defaultClaimTTL = 10 * time.Second

// A claim is used only while fresh: renewed (or granted) less than
// claimTTL - claimTTL/claimMarginDiv ago, counted from before the call that
// renewed it, so a node cut off from Postgres stops fetching a host before
// its claim can lapse there and another node take the host. A renewal
// gives up after claimTTL/renewTimeoutDiv, below the renew interval (a
// third of the TTL), so a blocked one never holds up the next.
const (
	claimMarginDiv  = 5
	renewTimeoutDiv = 4
)

// freshLocked says whether the claim may still be used at now.
func (h *host) freshLocked(now time.Time) bool {
	ttl := h.t.claimTTL
	return h.claimed && now.Sub(h.renewed) < ttl-ttl/claimMarginDiv
}

func newHostTable(holder string, st *store.Store, log *slog.Logger) *hostTable {
	return &hostTable{holder: holder, st: st, log: log, claimTTL: defaultClaimTTL, hosts: map[string]*host{}}
}

// get returns the host of a shard key, created on first use.
func (t *hostTable) get(key string) *host {
	t.mu.Lock()
	defer t.mu.Unlock()
	h, ok := t.hosts[key]
	if !ok {
		if len(t.hosts) > 50_000 {
			t.pruneLocked()
		}
		h = &host{t: t, key: key, users: map[int64]campaignPace{}, freed: make(chan struct{})}
		t.hosts[key] = h
	}
	return h
}

// pruneLocked drops hosts with nothing queued, running or claimed, so a
// broad crawl does not grow the table without bound.
func (t *hostTable) pruneLocked() {
	for k, h := range t.hosts {
		h.mu.Lock()
		idle := len(h.users) == 0 && h.active == 0 && !h.claimed
		h.mu.Unlock()
		if idle {
			delete(t.hosts, k)
		}
	}
}

func (t *hostTable) snapshot() []*host {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*host, 0, len(t.hosts))
	for _, h := range t.hosts {
		out = append(out, h)
	}
	return out
}

// keep renews every claim this node holds, in one statement, until ctx
// ends, and refreshes the hosts' policies on the way: a claim lost (the
// node was cut off too long) is noticed before the next request.
func (t *hostTable) keep(ctx context.Context) {
	tick := time.NewTicker(t.claimTTL / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		t.renewAll(ctx)
		t.refreshPolicies(ctx)
	}
}

func (t *hostTable) renewAll(ctx context.Context) {
	var held []store.HeldHost
	byKey := map[string]*host{}
	for _, h := range t.snapshot() {
		h.mu.Lock()
		if h.claimed {
			held = append(held, h.heldLocked())
			byKey[h.key] = h
		}
		h.mu.Unlock()
	}
	if len(held) == 0 {
		return
	}
	asked := time.Now() // the claims run from no earlier than this
	rctx, cancel := context.WithTimeout(ctx, t.claimTTL/renewTimeoutDiv)
	still, wanted, err := t.st.RenewHosts(rctx, t.holder, t.claimTTL, held)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			t.log.Warn("renew host claims; their hosts stop before the claims can lapse if this persists", "hosts", len(held), "error", err)
		}
		return
	}
	var yield []*host
	for key, h := range byKey {
		h.mu.Lock()
		if still[key] {
			h.renewed = asked
			h.wanted = wanted[key]
			if h.wanted && len(h.users) == 0 && h.active == 0 {
				yield = append(yield, h) // lingering, and another node asks for it
			}
		} else {
			h.claimed = false // another node took it over: claim again before the next request
		}
		h.mu.Unlock()
	}
	for _, h := range yield {
		h.letGo(ctx, false)
	}
}

// letGoAll lets go of every claim not in use, as the node stops: a
// lingering claim would keep the host from its next owner until it lapsed.
func (t *hostTable) letGoAll(ctx context.Context) {
	for _, h := range t.snapshot() {
		h.letGo(ctx, false)
	}
}

// refreshPolicies re-reads the strictest politeness of every host in use.
func (t *hostTable) refreshPolicies(ctx context.Context) {
	var keys []string
	byKey := map[string]*host{}
	for _, h := range t.snapshot() {
		h.mu.Lock()
		if len(h.users) > 0 || h.claimed {
			keys = append(keys, h.key)
			byKey[h.key] = h
		}
		h.mu.Unlock()
	}
	if len(keys) == 0 {
		return
	}
	policies, err := t.st.HostPolicies(ctx, keys)
	if err != nil {
		if ctx.Err() == nil {
			t.log.Warn("read host policies", "error", err)
		}
		return
	}
	for key, h := range byKey {
		h.setPolicy(policies[key])
	}
}

// campaignPace is one campaign's politeness for a host.
type campaignPace struct {
	delay       time.Duration
	concurrency int
	users       int // its URLs on this host, queued or running
}

// host paces the requests of one shard key on this node, for every
// campaign.
type host struct {
	t   *hostTable
	key string

	mu         sync.Mutex
	users      map[int64]campaignPace // campaigns with URLs here now
	policy     store.HostPolicy       // strictest among running campaigns, cluster-wide
	crawlDelay time.Duration          // robots.txt Crawl-delay, already capped
	learned    politeness.Adaptive    // extra delay and time to answer, from its answers
	next       time.Time              // earliest start of the next request
	last       time.Time              // start of the latest request
	reachedAt  time.Time              // when the host surely had the latest request it answered (see reached)
	active     int                    // requests started and not done
	// unanchored counts the requests started whose anchor (when the host
	// surely had them, fetch.Response.ReachedBy) is not known yet: with a
	// delay, no turn is granted while one is, since the next request's
	// earliest start is not known either.
	unanchored int
	freed      chan struct{} // closed when a request ends or is anchored, then replaced
	claimed    bool
	claimedAt  time.Time
	linger     *time.Timer // lets an idle claim go (see leave)
	renewed    time.Time
	wanted     bool      // another node asked for the claim
	yieldTill  time.Time // let go for another node's turn: no claim before this

	claimMu sync.Mutex // one claim operation at a time
}

// enter counts a URL of a campaign that will use the host; leave must
// follow.
func (h *host) enter(campaignKey int64, delay time.Duration, concurrency int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.users[campaignKey]
	p.delay, p.concurrency = delay, concurrency
	p.users++
	h.users[campaignKey] = p
}

// leave undoes enter; with no URL left and no request running, the claim
// is let go, recording when the host's next request may start. It says
// whether that was the campaign's last URL of the host on this engine:
// the host's next ones wait for its commit (its links, and the room the
// next lease sees).
func (h *host) leave(ctx context.Context, campaignKey int64) (last bool) {
	h.mu.Lock()
	if p := h.users[campaignKey]; p.users <= 1 {
		delete(h.users, campaignKey)
		last = true
	} else {
		p.users--
		h.users[campaignKey] = p
	}
	idle := len(h.users) == 0 && h.active == 0 && h.claimed
	wanted := h.wanted
	if idle && !wanted {
		// The host's next URLs are usually on their way (the lease's
		// refill): keep the claim a moment rather than let it go and
		// claim it again, a statement each and a policy read, for every
		// host every few seconds on a pool of many nodes.
		if h.linger == nil {
			h.linger = time.AfterFunc(claimLinger, func() { h.letGo(ctx, false) })
		} else {
			h.linger.Reset(claimLinger)
		}
	}
	h.mu.Unlock()
	if idle && wanted {
		h.letGo(ctx, false)
	}
	return last
}

// claimLinger is how long a node keeps the claim of a host it has no URL
// of, unless another node asks for it (see renewAll).
const claimLinger = time.Second

// letGo releases the claim if nobody uses the host (or, with yield, as
// soon as no request runs, for another node's turn).
func (h *host) letGo(ctx context.Context, yield bool) {
	h.claimMu.Lock()
	defer h.claimMu.Unlock()
	h.mu.Lock()
	if !h.claimed || h.active > 0 || (!yield && len(h.users) > 0) {
		h.mu.Unlock()
		return
	}
	h.claimed, h.wanted = false, false
	if yield {
		// Long enough for the node that asked to see the claim free.
		h.yieldTill = time.Now().Add(max(time.Second, h.gapLocked()))
	}
	held := h.heldLocked()
	h.mu.Unlock()
	if err := h.t.st.ReleaseHost(context.WithoutCancel(ctx), h.t.holder, held); err != nil {
		h.t.log.Warn("release host claim", "host", h.key, "error", err)
	}
}

// fairShare is how long a node keeps a host another node asks for.
const fairShare = 10 * time.Second

// yieldWhenIdle lets the claim go for another node's turn once no
// request of this node runs on the host.
func (h *host) yieldWhenIdle(ctx context.Context) {
	for {
		h.mu.Lock()
		active, freed := h.active, h.freed
		h.mu.Unlock()
		if active == 0 {
			h.letGo(ctx, true)
			return
		}
		select {
		case <-freed:
		case <-ctx.Done():
			return
		}
	}
}

// yieldDue says whether another node has waited for the host long enough
// that this node should let it go now.
func (h *host) yieldDue() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.claimed && h.wanted && time.Since(h.claimedAt) > fairShare
}

func (h *host) heldLocked() store.HeldHost {
	return store.HeldHost{
		ShardKey: h.key, NextIn: max(0, time.Until(h.next)), ExtraDelay: h.learned.Extra,
		Interval: spacing(h.delayLocked(), h.learned.Extra), Latency: h.learned.Latency,
	}
}

func (h *host) setPolicy(p store.HostPolicy) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.policy = p
	h.repaceLocked()
}

// delayLocked is the strictest delay that applies now: the campaigns'
// here and cluster-wide, and the host's robots.txt.
func (h *host) delayLocked() time.Duration {
	d := max(h.policy.MinDelay, h.crawlDelay)
	for _, p := range h.users {
		d = max(d, p.delay)
	}
	return d
}

// limitLocked is the strictest concurrency that applies now.
func (h *host) limitLocked() int {
	n := h.policy.Concurrency
	for _, p := range h.users {
		if p.concurrency > 0 && (n == 0 || p.concurrency < n) {
			n = p.concurrency
		}
	}
	return max(1, n)
}

func (h *host) gapLocked() time.Duration { return spacing(h.delayLocked(), h.learned.Extra) }

// gap is the least time between two starts that applies now.
func (h *host) gap() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.gapLocked()
}

// repaceLocked moves the next start back if a stricter delay now applies,
// counted from the latest evidence that the host had a request, or from
// the latest start when that is later (a request not yet answered).
func (h *host) repaceLocked() {
	from := h.last
	if h.reachedAt.After(from) {
		from = h.reachedAt
	}
	if from.IsZero() {
		return
	}
	if n := from.Add(h.gapLocked()); n.After(h.next) {
		h.next = n
	}
}

// setCrawlDelay applies a robots.txt Crawl-delay (already capped): it can
// only slow the host, never speed it. It counts from the latest request,
// which may be the robots.txt fetch that told it.
func (h *host) setCrawlDelay(d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if d > h.crawlDelay {
		h.crawlDelay = d
		h.repaceLocked()
	}
}

// spacing is the least time between two starts for a delay and an extra
// back-off (politeness.Spacing). A start spaces the next one by it, and
// the evidence that the host had the request (reached, observe) pushes
// the next start to a gap after that evidence: time a busy node or host
// takes to send or take in a request never shortens the next gap.
func spacing(delay, extra time.Duration) time.Duration { return politeness.Spacing(delay + extra) }

// turn waits for the host's claim, a concurrency slot and the host's pace,
// then for a node-wide slot (take and give, from the caller), and only then
// takes its start, so time spent waiting for the node never shortens the
// gap the host sees. It returns false, holding nothing, if stop closed
// first; after a true, the caller holds a node slot and a host slot and
// must call done, and its first request must pass reached as
// fetch.Options.Reached (or, sending none, call reached with zero time):
// with a delay, the host's next turn waits for it. Nothing here holds a
// worker slot: waiting is a goroutine.
//
// A start is taken only when it is due, not reserved ahead: if the host's
// pace changes while a request waits (a Retry-After, a stricter campaign),
// the wait follows it.
func (h *host) turn(ctx context.Context, stop <-chan struct{}, take func() bool, give func()) bool {
	for {
		if !h.claim(ctx, stop) || !h.acquire(stop) {
			return false
		}
		switch h.pace(ctx, stop, take, give) {
		case turnTaken:
			return true
		case turnStopped:
			h.release()
			return false
		case turnLost:
			h.release() // the claim was lost: wait for it again
		}
	}
}

type turnResult int

const (
	turnTaken turnResult = iota
	turnStopped
	turnLost
)

// pace waits for the host's next start and a node slot, then takes the
// start.
func (h *host) pace(ctx context.Context, stop <-chan struct{}, take func() bool, give func()) turnResult {
	for {
		h.mu.Lock()
		next, anchored := h.dueLocked()
		wait := time.Until(next)
		if !anchored {
			freed := h.freed
			h.mu.Unlock()
			select {
			case <-freed:
				continue
			case <-stop:
				return turnStopped
			}
		}
		h.mu.Unlock()
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-stop:
				t.Stop()
				return turnStopped
			}
		}
		if !take() {
			return turnStopped
		}
		h.mu.Lock()
		now := time.Now()
		if next, anchored := h.dueLocked(); next.After(now) || !anchored { // another request of this host started meanwhile
			h.mu.Unlock()
			give()
			continue
		}
		if !h.freshLocked(now) {
			// Not renewed for too long (Postgres out of reach): the claim
			// may lapse before this request ends, and another node take
			// the host. Claim it again first.
			h.claimed = false
			h.mu.Unlock()
			give()
			return turnLost
		}
		gap := h.gapLocked()
		h.next, h.last = now.Add(gap), now
		h.unanchored++
		h.mu.Unlock()
		// A long delay is written down before the request, so a node that
		// takes over after this one dies still keeps it.
		if gap >= h.t.claimTTL/2 {
			if !h.renew(ctx) {
				h.reached(time.Time{}) // never sent
				give()
				return turnLost
			}
			// The request goes out now, after the renew's round trip: the
			// next start counts from here.
			h.mu.Lock()
			now := time.Now()
			if next := now.Add(gap); next.After(h.next) {
				h.next = next
			}
			h.last = now
			h.mu.Unlock()
		}
		return turnTaken
	}
}

// dueLocked is the earliest start of the host's next request, and whether
// it is known: with a delay, not while a request is out whose anchor
// (when the host surely had it) is not known yet, since the next request
// must reach the host a delay after it did.
func (h *host) dueLocked() (next time.Time, anchored bool) {
	return h.next, h.unanchored == 0 || h.delayLocked() == 0
}

// acquire takes one of the host's concurrency slots.
func (h *host) acquire(stop <-chan struct{}) bool {
	for {
		h.mu.Lock()
		if h.active < h.limitLocked() {
			h.active++
			h.mu.Unlock()
			return true
		}
		freed := h.freed
		h.mu.Unlock()
		select {
		case <-freed:
		case <-stop:
			return false
		}
	}
}

// release gives a concurrency slot back.
func (h *host) release() {
	h.mu.Lock()
	h.active--
	h.wakeLocked()
	h.mu.Unlock()
}

// done ends a turn, after the request.
func (h *host) done() { h.release() }

// reached anchors the turn's request at at, when the host surely had it
// (fetch.Options.Reached; zero: it never went). The request may have
// reached the host later than its turn began (a dial, a busy machine, a
// slow accept): the next one counts from then, and may be granted from
// now on. Once per turn, by its first request (observe pushes the next
// start for any other: a robots.txt's redirects).
func (h *host) reached(at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.anchorLocked(at)
	if h.unanchored > 0 {
		h.unanchored--
		h.wakeLocked()
	}
}

// anchorLocked moves the next start to a gap after at, when the host
// surely had a request (zero: it never went), if that is later.
func (h *host) anchorLocked(at time.Time) {
	if at.IsZero() {
		return
	}
	if at.After(h.reachedAt) {
		h.reachedAt = at
	}
	if n := at.Add(h.gapLocked()); n.After(h.next) {
		h.next = n
	}
}

// wakeLocked wakes whoever waits on the host for a slot or an anchor.
func (h *host) wakeLocked() {
	close(h.freed)
	h.freed = make(chan struct{})
}

// claim makes sure this node holds the host's claim, waiting while another
// node holds it.
func (h *host) claim(ctx context.Context, stop <-chan struct{}) bool {
	wait := retry.Backoff(50*time.Millisecond, time.Second)
	for {
		h.claimMu.Lock()
		h.mu.Lock()
		held, yieldTill := h.claimed, h.yieldTill
		h.mu.Unlock()
		if held {
			h.claimMu.Unlock()
			return true
		}
		var err error
		if asked := time.Now(); asked.After(yieldTill) {
			var got map[string]store.HostClaim
			got, err = h.t.st.ClaimHosts(ctx, []string{h.key}, h.t.holder, h.t.claimTTL)
			if c, ok := got[h.key]; ok {
				h.granted(c, asked)
				h.claimMu.Unlock()
				return true
			}
		}
		h.claimMu.Unlock()
		if err != nil {
			h.t.log.Warn("claim host", "host", h.key, "error", err)
		}
		if !retry.Sleep(stop, wait) {
			return false
		}
	}
}

// claimAll claims, in one statement, the hosts of a batch just taken that
// this node does not hold yet, so their first turns find them held: on a
// pool of many nodes most of a new batch's hosts are new to its node, and
// their claims one by one were a round trip each, queued behind the whole
// pool's. A host it does not get here (another node holds it, one of its
// turns is claiming it, Postgres failed) is claimed at its turn, as ever.
func (t *hostTable) claimAll(ctx context.Context, hosts []*host) {
	asked := time.Now()
	var want []*host
	for _, h := range hosts {
		if !h.claimMu.TryLock() {
			continue // a turn claims it now, or it is in want already
		}
		h.mu.Lock()
		skip := h.claimed || !asked.After(h.yieldTill)
		h.mu.Unlock()
		if skip {
			h.claimMu.Unlock()
			continue
		}
		want = append(want, h)
	}
	if len(want) == 0 {
		return
	}
	defer func() {
		for _, h := range want {
			h.claimMu.Unlock()
		}
	}()
	keys := make([]string, len(want))
	for i, h := range want {
		keys[i] = h.key
	}
	got, err := t.st.ClaimHosts(ctx, keys, t.holder, t.claimTTL)
	if err != nil {
		if ctx.Err() == nil {
			t.log.Warn("claim a batch's hosts; each is claimed at its turn", "hosts", len(keys), "error", err)
		}
		return
	}
	for _, h := range want {
		if c, ok := got[h.key]; ok {
			h.granted(c, asked)
		}
	}
}

// granted takes a claim up, asked for at asked: the host's pace as its
// last holder left it, and the strictest policy of the campaigns crawling
// it now.
func (h *host) granted(c store.HostClaim, asked time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	h.claimed, h.claimedAt, h.renewed, h.wanted = true, now, asked, false
	if at := now.Add(c.Wait); at.After(h.next) {
		h.next = at
	}
	h.learned.Extra = c.ExtraDelay
	if h.learned.Latency == 0 {
		h.learned.Latency = c.Latency
	}
	h.policy = c.Policy
	h.repaceLocked()
}

// renew extends the claim and records the host's next start now; false if
// the claim was lost.
func (h *host) renew(ctx context.Context) bool {
	h.claimMu.Lock()
	defer h.claimMu.Unlock()
	h.mu.Lock()
	if !h.claimed {
		h.mu.Unlock()
		return false
	}
	held := h.heldLocked()
	h.mu.Unlock()
	asked := time.Now()
	rctx, cancel := context.WithTimeout(ctx, h.t.claimTTL/renewTimeoutDiv)
	still, wanted, err := h.t.st.RenewHosts(rctx, h.t.holder, h.t.claimTTL, []store.HeldHost{held})
	cancel()
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		h.t.log.Warn("renew host claim", "host", h.key, "error", err)
		return h.freshLocked(time.Now()) // go on while the claim we have is fresh
	}
	h.claimed = still[h.key]
	if h.claimed {
		h.renewed, h.wanted = asked, wanted[h.key]
	}
	return h.claimed
}

// observe adapts the host's pace to an answer: a Retry-After (429, 503) or
// a bare 429 pauses it, a run of server errors slows it, success speeds it
// back up; its time to answer feeds the estimate leasing sizes its work
// by. A pause is written to Postgres at once, so leasing skips the host
// for every campaign and any node that takes it over waits too.
func (h *host) observe(ctx context.Context, r *fetch.Response, maxRetryAfter time.Duration) {
	h.mu.Lock()
	h.anchorLocked(r.ReachedBy) // as reached did, for a request made without it
	pause := h.learned.Observe(politeness.Answer{
		Status: r.Status, Failed: r.Err != nil, Duration: r.Duration, RetryAfter: r.RetryAfter,
	}, maxRetryAfter, time.Now())
	if pause > 0 {
		if at := time.Now().Add(pause); at.After(h.next) {
			h.next = at
		}
	}
	h.mu.Unlock()
	if pause > 0 {
		if err := h.t.st.PauseHost(ctx, h.key, pause); err != nil {
			h.t.log.Warn("pause host", "host", h.key, "error", err)
		}
	}
}
