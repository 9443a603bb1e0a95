// Package retry holds spiderpool's one backoff, for loops that try a call
// until it works or their context ends: waits that grow from a first to a
// most, doubling, with jitter so that a pool of nodes retrying against one
// Postgres does not retry in step. The waits are cenkalti/backoff's
// exponential backoff, which never gives up by itself.
package retry

import (
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Backoff returns waits from first to most, each about twice the last.
func Backoff(first, most time.Duration) *backoff.ExponentialBackOff {
	return &backoff.ExponentialBackOff{
		InitialInterval:     first,
		RandomizationFactor: 0.2,
		Multiplier:          2,
		MaxInterval:         most,
	}
}

// Sleep waits b's next wait, or until done is closed: it says whether the
// wait ran out (and the caller may try again). A backoff that says stop
// (backoff.Stop) ends the loop too.
func Sleep(done <-chan struct{}, b backoff.BackOff) bool {
	next := b.NextBackOff()
	if next == backoff.Stop {
		return false
	}
	t := time.NewTimer(next)
	defer t.Stop()
	select {
	case <-done:
		return false
	case <-t.C:
		return true
	}
}
