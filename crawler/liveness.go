package crawler

import (
	"sync"
	"time"
)

// Liveness is how long an engine's holder token surely lives in Postgres.
// A registry heartbeat sent at t keeps the token alive there until at
// least t + TTL (the statement's now() is no earlier than t). A node whose
// heartbeat comes late (Postgres too busy to take it, or out of reach) may
// have lost its token: the next lease then returns the URLs it holds to
// pending and, with the node out of the ring, routes them to other nodes.
// So the engine starts no request once the token may have lapsed, and
// hands its URLs back instead: a node fetching from its queue while
// another fetches the same URLs would fetch them twice.
//
// The margin is the host claims' (a fifth of the TTL), for clocks and the
// request's own start. A nil Liveness is always alive: an engine without a
// registry heartbeat (tests) keeps its token by other means.
type Liveness struct {
	mu    sync.Mutex
	until time.Time
}

// Beat records a heartbeat sent at sent that Postgres took, keeping the
// token alive for ttl from then.
func (l *Liveness) Beat(sent time.Time, ttl time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if until := sent.Add(ttl - ttl/claimMarginDiv); until.After(l.until) {
		l.until = until
	}
}

// alive says whether a request started at now is under a live token.
func (l *Liveness) alive(now time.Time) bool {
	if l == nil {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return now.Before(l.until)
}
