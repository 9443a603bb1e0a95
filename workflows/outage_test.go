package workflows

import (
	"testing"
	"time"
)

// outageEventsPerHour bounds the history an hour of Postgres outage may
// add to a run, as historyMeter estimates it. The dispatcher's default
// max_history_events is 10,000: at this bound a run outlasts some ten
// hours of outage before it must continue as new, and an outage of a
// minute about 17, against the hundreds a minute of crawling writes.
// Control calls retried once a minute cost under 10 events a try (the
// retry timer, its workflow task, a marker per kind of call), some 500 an
// hour in this estimate; the bound leaves room for the backoff's first,
// faster steps.
const outageEventsPerHour = 1000

// TestPostgresOutageCostsBoundedHistory: every control call (lease,
// membership, releases, ring-change writes, looks at the figures, finish)
// fails and no node takes a batch for an hour of workflow time, as while
// Postgres is down; the
// campaign then resumes within controlRetryMax and completes, and the
// outage adds fewer than outageEventsPerHour events to the run's history.
func TestPostgresOutageCostsBoundedHistory(t *testing.T) {
	f := newFakeCluster(12, 10, alive("a", 1), alive("b", 1), alive("c", 2))
	f.outageAt, f.outageFor = 10, time.Hour
	env := newEnv(t, f)
	f.now = env.Now
	meter := newHistoryMeter(env, false)
	sum := run(t, env, testSpec())

	if f.outageFrom.IsZero() {
		t.Fatal("the campaign ended before the outage; the test proves nothing")
	}
	if sum.Fetched != 120 || f.fetched != 120 {
		t.Fatalf("fetched %d (summary %d) of 120 after the outage", f.fetched, sum.Fetched)
	}
	perHour, by := meter.between(f.outageFrom, f.outageTo)
	resumedAfter := f.resumedAt.Sub(f.outageTo)
	t.Logf("an hour of outage added %d events (estimated, an upper bound: %v); the first lease after it came %v after Postgres was back; %d events in all",
		perHour, by, resumedAfter, meter.total())
	if perHour > outageEventsPerHour {
		t.Fatalf("an hour of outage added %d events to history, more than %d", perHour, outageEventsPerHour)
	}
	if resumedAfter < 0 || resumedAfter > controlRetryMax+leasePace {
		t.Fatalf("the campaign leased again %v after the outage ended, want within %v", resumedAfter, controlRetryMax+leasePace)
	}
}
