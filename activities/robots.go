package activities

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/spiderpool/spiderpool/crawl"
	"github.com/spiderpool/spiderpool/fetch"
	"github.com/spiderpool/spiderpool/store"
)

// robotsCache keeps each origin's robots.txt: in memory, then in Postgres
// (so other nodes and restarts reuse it), then from the origin, once, with
// the host's politeness applied to that request too.
type robotsCache struct {
	st      *store.Store
	fetcher *fetch.Fetcher
	log     *slog.Logger
	slots   chan struct{} // the node-wide request cap, shared with Fetch

	mu      sync.Mutex
	entries map[robotsKey]robotsEntry
	flight  singleflight.Group
}

type robotsKey struct {
	campaign int64
	origin   string
}

type robotsEntry struct {
	robots  *crawl.Robots
	refused string
	expires time.Time
}

// errStopped: the batch stopped before the robots.txt could be fetched.
var errStopped = errors.New("batch stopping")

func newRobotsCache(st *store.Store, f *fetch.Fetcher, slots chan struct{}, log *slog.Logger) *robotsCache {
	return &robotsCache{st: st, fetcher: f, slots: slots, log: log, entries: map[robotsKey]robotsEntry{}}
}

func (c *robotsCache) take(stop <-chan struct{}) func() bool {
	return func() bool {
		select {
		case c.slots <- struct{}{}:
			return true
		case <-stop:
			return false
		}
	}
}

func (c *robotsCache) give() { <-c.slots }

// robotsFetch is what loading a robots.txt found.
type robotsFetch struct {
	robots  *crawl.Robots
	expires time.Time
	fresh   bool // fetched from the origin just now (so sitemaps are read once)
	// refused is set when the origin cannot be reached for good (its
	// address is blocked, its host does not exist): its URLs fail with it.
	refused string
}

// refusedFor is how long an origin found unreachable for good is
// remembered, so its other URLs fail without asking again.
const refusedFor = time.Minute

// get returns the origin's robots.txt and when it expires.
func (c *robotsCache) get(ctx context.Context, r *rules, campaignKey int64, u crawl.URL, g *gate, stop <-chan struct{}) (robotsFetch, error) {
	k := robotsKey{campaignKey, u.Origin()}
	c.mu.Lock()
	e, ok := c.entries[k]
	c.mu.Unlock()
	if ok && time.Now().Before(e.expires) {
		return robotsFetch{robots: e.robots, refused: e.refused, expires: e.expires}, nil
	}
	v, err, shared := c.flight.Do(fmt.Sprintf("%d|%s", k.campaign, k.origin), func() (any, error) {
		return c.load(ctx, r, k, g, stop)
	})
	if err != nil {
		return robotsFetch{}, err
	}
	rf := v.(robotsFetch)
	rf.fresh = rf.fresh && !shared
	return rf, nil
}

func (c *robotsCache) load(ctx context.Context, r *rules, k robotsKey, g *gate, stop <-chan struct{}) (robotsFetch, error) {
	stored, ok, err := c.st.Robots(ctx, k.campaign, k.origin)
	if err != nil {
		return robotsFetch{}, err
	}
	if ok {
		rf := robotsFetch{robots: crawl.ParseRobots(stored.Status, stored.Body), expires: time.Now().Add(stored.ExpiresIn)}
		c.remember(k, rf)
		return rf, nil
	}
	if !g.turn(ctx, stop, c.take(stop), c.give) {
		return robotsFetch{}, errStopped
	}
	status, body, refused := c.fetchFile(ctx, r, k.origin+"/robots.txt", g)
	c.give()
	g.done()
	if refused != "" {
		rf := robotsFetch{refused: refused, expires: time.Now().Add(refusedFor)}
		c.remember(k, rf)
		return rf, nil
	}
	robots := crawl.ParseRobots(status, body)
	ttl := r.spec.Politeness.RobotsTTL.D()
	if robots.Unavailable() {
		ttl = r.spec.Politeness.RobotsRetry.D()
	}
	if err := c.st.PutRobots(ctx, k.campaign, k.origin, status, body, ttl); err != nil {
		return robotsFetch{}, err
	}
	rf := robotsFetch{robots: robots, expires: time.Now().Add(ttl), fresh: true}
	c.remember(k, rf)
	return rf, nil
}

// maxRobotsRedirects: RFC 9309 asks crawlers to follow at least five.
const maxRobotsRedirects = 5

// fetchFile GETs a robots.txt, following redirects itself; status 0 means
// no answer. refused says why, when the failure is one no retry will fix.
func (c *robotsCache) fetchFile(ctx context.Context, r *rules, url string, g *gate) (status int, body []byte, refused string) {
	for range maxRobotsRedirects + 1 {
		resp := c.fetcher.Get(ctx, url, fetch.Options{
			UserAgent: r.spec.Politeness.UserAgent, ConnectTimeout: r.spec.Timeouts.Connect.D(),
			RequestTimeout: r.spec.Timeouts.Request.D(), IdleTimeout: r.spec.Timeouts.Idle.D(),
			MaxBodyBytes: crawl.MaxRobotsBytes, KeepBody: true, KeepAnyType: true,
		})
		g.observe(ctx, &resp, r.spec.Politeness.MaxRetryAfter.D())
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

func (c *robotsCache) remember(k robotsKey, rf robotsFetch) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) > 100_000 {
		now := time.Now()
		for key, e := range c.entries {
			if now.After(e.expires) {
				delete(c.entries, key)
			}
		}
	}
	c.entries[k] = robotsEntry{robots: rf.robots, refused: rf.refused, expires: rf.expires}
}
