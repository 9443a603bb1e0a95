package retry

import (
	"testing"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// TestBackoffGrowsToItsMostAndStops: the waits start near first, about
// double, never pass most (with its jitter), and Sleep ends early when
// done is closed.
func TestBackoffGrowsToItsMostAndStops(t *testing.T) {
	b := Backoff(100*time.Millisecond, time.Second)
	var waits []time.Duration
	for range 8 {
		waits = append(waits, b.NextBackOff())
	}
	if waits[0] < 80*time.Millisecond || waits[0] > 120*time.Millisecond {
		t.Errorf("first wait %v, want about 100ms", waits[0])
	}
	for i, w := range waits {
		if w > 1200*time.Millisecond {
			t.Errorf("wait %d is %v, past the most (1s) and its jitter", i, w)
		}
	}
	if last := waits[len(waits)-1]; last < 800*time.Millisecond {
		t.Errorf("after 8 waits %v, want near the most", last)
	}
	done := make(chan struct{})
	close(done)
	if Sleep(done, Backoff(time.Hour, time.Hour)) {
		t.Error("Sleep ran out an hour's wait with done closed")
	}
	if !Sleep(make(chan struct{}), Backoff(time.Millisecond, time.Millisecond)) {
		t.Error("Sleep said done for a wait that ran out")
	}
}

// TestSleepEndsOnStop: a backoff that says stop ends the loop at once
// rather than spinning.
func TestSleepEndsOnStop(t *testing.T) {
	if Sleep(make(chan struct{}), &backoff.StopBackOff{}) {
		t.Error("Sleep said try again for a backoff that says stop")
	}
}
