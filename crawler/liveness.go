package crawler

import (
	"sync"
	"time"
)

// Liveness is how long an engine's holder token surely lives in Postgres.
// A registry heartbeat sent at t keeps the token alive there until at
// least t + TTL (the statement's now() is no earlier than t). A node whose
// heartbeat comes late (Postgres too busy to take it, or out of reach) may
// have lost its token: the next lease then returns the URLs it claimed to
// pending and, with the node out of the ring, routes them to other nodes.
// So the engine sends no request for a URL once the token it was claimed
// under may have lapsed, even after a later heartbeat revives the token,
// and hands the URL back instead: a node fetching from its queue while
// another fetches the same URLs would fetch them twice.
//
// The margin is the host claims' (a fifth of the TTL), for clocks and the
// request's own start. A nil Liveness is always alive: an engine without a
// registry heartbeat (tests) keeps its token by other means.
type Liveness struct {
	mu    sync.Mutex
	until time.Time
	// gen counts the times the token may have lapsed: a URL claimed in
	// an earlier generation may be another node's.
	gen uint64
}

// Beat records a heartbeat sent at sent that Postgres took by done,
// keeping the token alive for ttl from sent. A beat taken after the last
// one's time ran out starts a new generation.
func (l *Liveness) Beat(sent, done time.Time, ttl time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.until.IsZero() && !done.Before(l.until) {
		l.gen++
	}
	if until := sent.Add(ttl - ttl/claimMarginDiv); until.After(l.until) {
		l.until = until
	}
}

// generation is the token's generation now: read it before claiming.
func (l *Liveness) generation() uint64 {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.gen
}

// holds says whether a URL claimed in generation gen is still this
// process's to fetch at now.
func (l *Liveness) holds(gen uint64, now time.Time) bool {
	if l == nil {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return gen == l.gen && now.Before(l.until)
}
