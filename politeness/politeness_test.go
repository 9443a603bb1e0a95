package politeness

import (
	"testing"
	"time"
)

// TestAdaptiveSlowing: a run of 5xx slows a host, a few do not, and
// success brings it back to full speed.
func TestAdaptiveSlowing(t *testing.T) {
	var a Adaptive
	now := time.Unix(1000, 0)
	ok, fail := Answer{Status: 200}, Answer{Status: 502}
	for i := range 10 {
		a.Observe(ok, time.Minute, now)
		if i%4 == 0 {
			a.Observe(fail, time.Minute, now)
		}
	}
	if a.Extra != 0 {
		t.Fatalf("scattered errors slowed the host by %v", a.Extra)
	}
	for range 20 {
		now = now.Add(max(time.Second, a.Extra) + time.Millisecond) // past the last slowing
		a.Observe(fail, time.Minute, now)
	}
	if a.Extra < time.Second || a.Extra > maxBackoff {
		t.Fatalf("after 20 errors in a row the extra delay is %v", a.Extra)
	}
	for range 30 {
		a.Observe(ok, time.Minute, now)
	}
	if a.Extra != 0 {
		t.Fatalf("after recovery the extra delay is still %v", a.Extra)
	}
}

// TestABurstOfErrorsSlowsOnce: concurrent answers that arrive together
// double the extra delay once, not once each.
func TestABurstOfErrorsSlowsOnce(t *testing.T) {
	var a Adaptive
	now := time.Unix(1000, 0)
	for range 20 {
		a.Observe(Answer{Status: 503}, time.Minute, now)
	}
	if a.Extra != minBackoff {
		t.Fatalf("20 errors at one instant: extra delay %v, want %v (one doubling)", a.Extra, minBackoff)
	}
}

// TestRetryAfterPauses: a 429 or 503 with Retry-After pauses the host for
// it, at most the campaign's cap; a bare 429 pauses at least a second.
func TestRetryAfterPauses(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, c := range []struct {
		name string
		a    Answer
		want time.Duration
	}{
		{"503 with Retry-After", Answer{Status: 503, RetryAfter: 5 * time.Second}, 5 * time.Second},
		{"429 past the cap", Answer{Status: 429, RetryAfter: time.Hour}, time.Minute},
		{"bare 429", Answer{Status: 429}, time.Second},
		{"500 with Retry-After", Answer{Status: 500, RetryAfter: 5 * time.Second}, 0},
		{"200", Answer{Status: 200}, 0},
	} {
		var a Adaptive
		if got := a.Observe(c.a, time.Minute, now); got != c.want {
			t.Errorf("%s: pause %v, want %v", c.name, got, c.want)
		}
	}
}

// TestSpacingCoversClocksAndNoMore: gaps count from evidence that the
// host had the previous request (its answer's first byte), so the margin
// need only cover two machines' clocks running at different rates (NTP
// slews a clock by at most 0.05%). Anything more is a host's rate given
// away on every request: 15 ms a second was 1.4% of a polite campaign.
func TestSpacingCoversClocksAndNoMore(t *testing.T) {
	if Spacing(0) != 0 {
		t.Fatal("no delay must mean no spacing")
	}
	for _, d := range []time.Duration{time.Second, 5 * time.Second, 250 * time.Millisecond} {
		got := Spacing(d)
		if slew := d / 2000; got < d+slew {
			t.Errorf("Spacing(%v) = %v, want at least the delay and a clock slew of %v", d, got, slew)
		}
		if most := d + d/500; got > most {
			t.Errorf("Spacing(%v) = %v, want at most %v: the margin costs the host's rate", d, got, most)
		}
	}
}

// TestQuotaFollowsThePace: a host's work in flight is what it can do in
// the horizon at its allowed rate, whichever bounds it: the delay, or the
// time to answer over its concurrency.
func TestQuotaFollowsThePace(t *testing.T) {
	h := 4 * time.Second
	for _, c := range []struct {
		name string
		pace Pace
		want int
	}{
		{"a second apart", Pace{Interval: time.Second, Latency: 200 * time.Millisecond, Concurrency: 1}, 4},
		{"slower to answer than its delay", Pace{Interval: time.Second, Latency: 2 * time.Second, Concurrency: 1}, 2},
		{"two at a time, a second each", Pace{Latency: time.Second, Concurrency: 2}, 8},
		{"a long crawl-delay", Pace{Interval: 30 * time.Second, Concurrency: 1}, 1},
		{"nothing known", Pace{Concurrency: 2}, 100},
		{"fast", Pace{Latency: time.Millisecond, Concurrency: 4}, 100},
	} {
		if got := c.pace.Quota(h, 100); got != c.want {
			t.Errorf("%s: quota %d, want %d", c.name, got, c.want)
		}
	}
}
