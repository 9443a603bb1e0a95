package crawler

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/spiderpool/spiderpool/crawl"
	"github.com/spiderpool/spiderpool/fetch"
	"github.com/spiderpool/spiderpool/store"
)

// robotsCache keeps each origin's robots.txt for the whole cluster: in
// memory, then in Postgres (so other nodes, other campaigns and restarts
// reuse it), then from the origin, once, under the host's claim and pace.
// Each campaign judges a stored file's age by its own robots_ttl.
type robotsCache struct {
	st      *store.Store
	fetcher *fetch.Fetcher
	slots   *fairSlots // the node-wide request cap, shared with page fetches
	log     *slog.Logger

	mu      sync.Mutex
	entries map[string]robotsEntry
	flight  singleflight.Group
}

type robotsEntry struct {
	robots    *crawl.Robots
	fetchedAt time.Time
	// failingSince is when the origin's robots.txt was first found
	// unavailable (5xx, no answer) in the run of tries that found it so;
	// zero once it answers. It is this node's memory: a node that restarts,
	// or takes the host over from another, counts from its own first try.
	failingSince time.Time
	refused      string    // unreachable for good (blocked address, no such host)
	until        time.Time // refused is remembered until then
}

// errStopped: the URL's batch stopped before the robots.txt could be had.
var errStopped = errors.New("batch stopping")

func newRobotsCache(st *store.Store, f *fetch.Fetcher, slots *fairSlots, log *slog.Logger) *robotsCache {
	return &robotsCache{st: st, fetcher: f, slots: slots, log: log, entries: map[string]robotsEntry{}}
}

// robotsFetch is what loading a robots.txt found.
type robotsFetch struct {
	robots *crawl.Robots
	// expires is when the campaign asking must look again.
	expires time.Time
	// failingSince is when an unavailable robots.txt started failing, as
	// this node saw it (see robotsEntry).
	failingSince time.Time
	// refused is set when the origin cannot be reached for good: its URLs
	// fail with it.
	refused string
}

// refusedFor is how long an origin found unreachable for good is
// remembered, so its other URLs fail without asking again.
const refusedFor = time.Minute

// ttlFor is how long a file may be trusted by a campaign with these rules:
// robots_ttl, or robots_retry for one that could not be had.
func ttlFor(r *rules, robots *crawl.Robots) time.Duration {
	if robots.Unavailable() {
		return r.spec.Politeness.RobotsRetry.D()
	}
	return r.spec.Politeness.RobotsTTL.D()
}

// archiveFunc archives an exchange of a campaign's as it happens.
type archiveFunc func(ctx context.Context, r *rules, url string, resp *fetch.Response)

// get returns the origin's robots.txt as fresh as the campaign of r asks;
// a fetch it makes is archived with archive, in that campaign's files.
func (c *robotsCache) get(ctx context.Context, r *rules, campaignKey int64, origin string, h *host, stop <-chan struct{}, archive archiveFunc) (robotsFetch, error) {
	if rf, ok := c.cached(r, origin); ok {
		return rf, nil
	}
	v, err, _ := c.flight.Do(origin, func() (any, error) {
		if rf, ok := c.cached(r, origin); ok {
			return rf, nil
		}
		return c.load(ctx, r, campaignKey, origin, h, stop, archive)
	})
	if err != nil {
		return robotsFetch{}, err
	}
	rf := v.(robotsFetch)
	if rf.robots != nil {
		// Another campaign's load may have shared a file this one trusts
		// for a different time.
		e := c.entry(origin)
		rf.expires, rf.failingSince = e.fetchedAt.Add(ttlFor(r, rf.robots)), e.failingSince
	}
	return rf, nil
}

func (c *robotsCache) entry(origin string) robotsEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.entries[origin]
}

// cached answers from memory when the campaign of r still trusts the copy.
func (c *robotsCache) cached(r *rules, origin string) (robotsFetch, bool) {
	e := c.entry(origin)
	now := time.Now()
	switch {
	case e.refused != "" && now.Before(e.until):
		return robotsFetch{refused: e.refused, expires: e.until}, true
	case e.robots != nil:
		if exp := e.fetchedAt.Add(ttlFor(r, e.robots)); now.Before(exp) {
			return robotsFetch{robots: e.robots, expires: exp, failingSince: e.failingSince}, true
		}
	}
	return robotsFetch{}, false
}

func (c *robotsCache) load(ctx context.Context, r *rules, campaignKey int64, origin string, h *host, stop <-chan struct{}, archive archiveFunc) (robotsFetch, error) {
	stored, ok, err := c.st.Robots(ctx, origin)
	if err != nil {
		return robotsFetch{}, err
	}
	if ok {
		robots := crawl.ParseRobots(stored.Status, stored.Body)
		if ttl := ttlFor(r, robots); stored.Age < ttl {
			return c.found(r, origin, robots, time.Now().Add(-stored.Age)), nil
		}
	}
	if !h.turn(ctx, stop, func() bool { return c.slots.take(campaignKey, stop) }, func() { c.slots.give(campaignKey) }) {
		return robotsFetch{}, errStopped
	}
	// Another node may have fetched it while this one waited for the host.
	if stored, ok, err := c.st.Robots(ctx, origin); err == nil && ok {
		if robots := crawl.ParseRobots(stored.Status, stored.Body); stored.Age < ttlFor(r, robots) {
			c.slots.give(campaignKey)
			h.reached(time.Time{}) // the turn sends nothing
			h.done()
			return c.found(r, origin, robots, time.Now().Add(-stored.Age)), nil
		}
	}
	status, body, refused := c.fetchFile(ctx, r, origin+"/robots.txt", h, archive)
	c.slots.give(campaignKey)
	h.done()
	if refused != "" {
		until := time.Now().Add(refusedFor)
		c.remember(origin, robotsEntry{refused: refused, until: until})
		return robotsFetch{refused: refused, expires: until}, nil
	}
	if err := c.st.PutRobots(ctx, origin, status, body); err != nil {
		return robotsFetch{}, err
	}
	return c.found(r, origin, crawl.ParseRobots(status, body), time.Now()), nil
}

// runGap is the slack, beyond robots_retry, between two failed tries of
// a robots.txt that still makes them one run of failures: the time for the
// host's URLs to come round again (a lease, a batch, the host's turn).
const runGap = time.Minute

// found remembers a robots.txt fetched (here or by another node) at
// fetchedAt. An unavailable one carries on the run of failures before it
// when the last of them is recent: no longer ago than the campaign's
// robots_ttl (a longer gap says nothing of the time between), one
// robots_retry and runGap.
func (c *robotsCache) found(r *rules, origin string, robots *crawl.Robots, fetchedAt time.Time) robotsFetch {
	e := robotsEntry{robots: robots, fetchedAt: fetchedAt}
	if robots.Unavailable() {
		e.failingSince = fetchedAt
		prev := c.entry(origin)
		gap := r.spec.Politeness.RobotsTTL.D() + r.spec.Politeness.RobotsRetry.D() + runGap
		if prev.robots != nil && prev.robots.Unavailable() && !prev.failingSince.IsZero() &&
			fetchedAt.Sub(prev.fetchedAt) <= gap && prev.failingSince.Before(fetchedAt) {
			e.failingSince = prev.failingSince
		}
	}
	c.remember(origin, e)
	return robotsFetch{robots: robots, expires: fetchedAt.Add(ttlFor(r, robots)), failingSince: e.failingSince}
}

// maxRobotsRedirects: RFC 9309 asks crawlers to follow at least five.
const maxRobotsRedirects = 5

// fetchFile GETs a robots.txt, following redirects itself; status 0 means
// no answer. refused says why, when the failure is one no retry will fix.
// Each request it makes is archived, redirects included.
func (c *robotsCache) fetchFile(ctx context.Context, r *rules, url string, h *host, archive archiveFunc) (status int, body []byte, refused string) {
	for i := range maxRobotsRedirects + 1 {
		o := fetch.Options{
			UserAgent: r.spec.Politeness.UserAgent, ConnectTimeout: r.spec.Timeouts.Connect.D(),
			RequestTimeout: r.spec.Timeouts.Request.D(), IdleTimeout: r.spec.Timeouts.Idle.D(),
			MaxBodyBytes: crawl.MaxRobotsBytes, KeepBody: true, KeepAnyType: true, Capture: archive != nil,
		}
		if i == 0 {
			o.Reached = h.reached // the turn's request; its redirects only push the next start (observe)
		}
		resp := c.fetcher.Get(ctx, url, o)
		if archive != nil {
			archive(ctx, r, url, &resp)
		}
		h.observe(ctx, &resp, r.spec.Politeness.MaxRetryAfter.D())
		if resp.Err != nil {
			if fetch.Classify(&resp, nil) == fetch.Final {
				return 0, nil, fetch.Describe(&resp)
			}
			return 0, nil, ""
		}
		if resp.Status >= 300 && resp.Status < 400 && resp.Location != "" {
			base, err := crawl.Canonicalize(url)
			if err != nil {
				return 0, nil, ""
			}
			next, err := crawl.Resolve(base, resp.Location)
			if err != nil {
				return 0, nil, ""
			}
			url = next.String
			continue
		}
		return resp.Status, resp.Body, ""
	}
	return 0, nil, "" // a redirect loop: as unreachable
}

func (c *robotsCache) remember(origin string, e robotsEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) > 100_000 {
		now := time.Now()
		for key, old := range c.entries {
			if old.robots == nil && now.After(old.until) || old.robots != nil && now.Sub(old.fetchedAt) > 24*time.Hour {
				delete(c.entries, key)
			}
		}
	}
	c.entries[origin] = e
}
