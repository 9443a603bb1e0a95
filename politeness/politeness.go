// Package politeness holds the pacing formulas spiderpool keeps every host
// to, in one place: the least gap between two requests a delay makes
// (Spacing), how much of a host's work to have in flight (Pace.Quota), and
// how a host's answers slow it down or let it speed back up (Adaptive).
// Leasing (store) sizes a host's work by them, and each node's engine
// (crawler) paces its requests by them; neither keeps a formula of its own.
package politeness

import (
	"math"
	"net/http"
	"time"
)

// Spacing is the least time a delay makes between evidence that a host
// had a request (its answer's first byte, or the failure of a request
// written and never answered: fetch.Response.ReachedBy) and the start of
// the next one. That evidence comes after the host took the request in,
// and the next request reaches it after it starts, so the host sees at
// least the delay whatever the network's jitter; the margin of 0.1% is
// for two machines' clocks running at different rates (NTP slews a clock
// by at most 0.05%). A start a request never followed (it was not sent)
// spaces the next one by as much.
func Spacing(delay time.Duration) time.Duration {
	if delay <= 0 {
		return 0
	}
	return delay + delay/1000
}

// Pace is what is known of how fast a host may be fetched.
type Pace struct {
	Interval    time.Duration // least time between two starts
	Latency     time.Duration // typical time to answer
	Concurrency int
}

// PerRequest is the time one more request of the host takes at its allowed
// rate; 0 when nothing bounds it.
func (p Pace) PerRequest() time.Duration {
	return max(p.Interval, p.Latency/time.Duration(max(1, p.Concurrency)))
}

// Quota is how many URLs of the host to keep in flight: what it can fetch
// in horizon, at least one, at most most.
func (p Pace) Quota(horizon time.Duration, most int) int {
	per := p.PerRequest()
	if per <= 0 {
		return most
	}
	return min(max(int(math.Ceil(float64(horizon)/float64(per))), 1), most)
}

// How a host's answers change its pace: a moving average of answers that
// were server errors (or no answer at all) above errSlow, over at least
// errMinAnswers answers, doubles an extra delay (from minBackoff to
// maxBackoff), at most once per second or per extra delay; below errFast
// it halves. A few failing pages do not slow a healthy host; a struggling
// host is given room.
const (
	errAlpha      = 0.2
	errSlow       = 0.5
	errFast       = 0.2
	errMinAnswers = 8
	minBackoff    = 250 * time.Millisecond // first extra delay after a 5xx
	maxBackoff    = 10 * time.Second       // most extra delay 5xx answers earn
	latencyAlpha  = 0.3
)

// Adaptive is what a host's answers taught: its extra delay and its time
// to answer. The zero value is a host never heard from.
type Adaptive struct {
	Extra   time.Duration // added to the delay (see Spacing)
	Latency time.Duration // moving average of the time to answer
	errRate float64
	answers int
	slowed  time.Time
}

// Answer is one answer of a host, as Observe reads it.
type Answer struct {
	Status     int
	Failed     bool          // no answer at all (a network error)
	Duration   time.Duration // time to answer
	RetryAfter time.Duration // the answer's Retry-After, if any
}

// Observe takes an answer received at now and returns how long the host
// must pause (a Retry-After on a 429 or 503, or a bare 429), at most
// maxRetryAfter; 0 for none.
func (a *Adaptive) Observe(r Answer, maxRetryAfter time.Duration, now time.Time) (pause time.Duration) {
	serverError := r.Status >= 500 || r.Status == http.StatusTooManyRequests || (r.Status == 0 && r.Failed)
	a.errRate = (1-errAlpha)*a.errRate + errAlpha*boolFloat(serverError)
	a.answers++
	if r.Status != 0 && r.Duration > 0 {
		if a.Latency == 0 {
			a.Latency = r.Duration
		} else {
			a.Latency = time.Duration((1-latencyAlpha)*float64(a.Latency) + latencyAlpha*float64(r.Duration))
		}
	}
	switch {
	case r.RetryAfter > 0 && (r.Status == http.StatusTooManyRequests || r.Status == http.StatusServiceUnavailable):
		pause = min(r.RetryAfter, maxRetryAfter)
	case r.Status == http.StatusTooManyRequests:
		pause = min(max(time.Second, a.Extra), maxRetryAfter)
	}
	switch {
	case serverError && a.errRate > errSlow && a.answers >= errMinAnswers && now.Sub(a.slowed) > max(time.Second, a.Extra):
		a.Extra = min(max(2*a.Extra, minBackoff), maxBackoff)
		a.slowed = now
	case a.errRate < errFast:
		if a.Extra /= 2; a.Extra < 50*time.Millisecond {
			a.Extra = 0
		}
	}
	return pause
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
