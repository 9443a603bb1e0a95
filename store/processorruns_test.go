package store_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/store"
	"github.com/spiderpool/spiderpool/tests/harness"
)

// TestResetReleasesOnlyOtherRunsLeases: a run's first lease returns to
// pending what earlier runs held (their batches may never come back),
// and never what batches of its own run hold, which run beside it.
func TestResetReleasesOnlyOtherRunsLeases(t *testing.T) {
	s := harness.OpenStore(t)
	key, _ := queueForProcessor(t, s, 6)
	const oldRun, newRun = int64(7), int64(9)
	lease := runLeases(t, s, key)
	old := lease(oldRun, 1)
	mine := lease(newRun, 1)
	if len(old) != 3 || len(mine) != 3 {
		t.Fatalf("leased %v and %v, want 3 pages each", old, mine)
	}
	n, err := s.ReleaseDeliveries(ctx, key, "p", campaign.LeaseRun(newRun<<32|2))
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Errorf("released %d pages, want the old run's 3", n)
	}
	again := lease(newRun, 2)
	if len(again) != 3 || again[0] != old[0] {
		t.Errorf("the next lease took %v, want the old run's pages %v", again, old)
	}
	if held := lease(newRun, 1); len(held) != 3 || held[0] != mine[0] {
		t.Errorf("the run's own first lease holds %v after the reset, want %v", held, mine)
	}
}

// TestEndedRunsLeaseNothing: a lease that finds nothing pending takes
// back what ended runs' batches hold, even before its own run's reset
// (a run's batches start side by side, and the first carries the reset),
// but never the live run's. Once the reset has made a run live, a lease
// of the run before (its ProcessBatch child, terminated at continue-as-new
// in the middle of its lease) takes nothing, a late reset of that run
// releases nothing, and that run's batch stores nothing.
func TestEndedRunsLeaseNothing(t *testing.T) {
	s := harness.OpenStore(t)
	key, _ := queueForProcessor(t, s, 9)
	const oldRun, newRun = int64(7), int64(9)
	lease := runLeases(t, s, key)
	reset := func(run int64) int {
		t.Helper()
		n, err := s.ReleaseDeliveries(ctx, key, "p", run)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	reset(oldRun)
	old := lease(oldRun, 1)
	if early := append(lease(newRun, 2), lease(newRun, 3)...); len(old) != 3 || len(early) != 6 {
		t.Fatalf("the old run leased %v, the new run before its reset %v: want 3 and the other 6", old, early)
	}
	// The old run is still the live one: its batches are in flight, and no
	// lease takes them back (a run older than the live one, never reset,
	// would take a live run's batches so; see
	// TestLateLeaseNeverReclaimsTheLiveRunsBatches). The new run's reset
	// returns them.
	if got := lease(newRun, 4); len(got) != 0 {
		t.Errorf("the new run's lease with nothing pending, before its reset, took %v, want none of the live run's", got)
	}
	if n := reset(newRun); n != len(old) {
		t.Errorf("the new run's reset released %d pages, want the old run's %d", n, len(old))
	}
	if got := lease(newRun, 4); fmt.Sprint(got) != fmt.Sprint(old) {
		t.Errorf("the new run's lease after its reset took %v, want the old run's %v", got, old)
	}
	if got := lease(oldRun, 2); len(got) != 0 {
		t.Errorf("a lease of the ended run took %v, want nothing", got)
	}
	if n := reset(oldRun); n != 0 {
		t.Errorf("a late reset of the ended run released %d pages, want none", n)
	}
	if n, err := s.DeliveriesWaiting(ctx, key, "p", 100); err != nil || n != 0 {
		t.Errorf("%d pages pending (%v), want none: the live run's batches hold them all", n, err)
	}
	var results []store.Processed
	for _, id := range old {
		results = append(results, store.Processed{ID: id, Items: []json.RawMessage{json.RawMessage(`{"late":true}`)}})
	}
	if n, err := s.StoreProcessed(ctx, store.Lease{CampaignKey: key, CampaignID: "c", Processor: "p", ID: oldRun<<32 | 1}, results); err != nil || n != 0 {
		t.Errorf("the ended run's batch stored %d pages (%v), want none: the live run has them", n, err)
	}
}

// TestLateLeaseNeverReclaimsTheLiveRunsBatches: a lease of a run that is
// neither live nor ended (an earlier run that never reset, its lease come
// late), finding nothing pending, takes back nothing the live run's
// batches hold: they are in flight, not stranded.
func TestLateLeaseNeverReclaimsTheLiveRunsBatches(t *testing.T) {
	s := harness.OpenStore(t)
	key, _ := queueForProcessor(t, s, 9)
	const firstRun, lateRun, liveRun = int64(7), int64(8), int64(9)
	lease := runLeases(t, s, key)
	if _, err := s.ReleaseDeliveries(ctx, key, "p", firstRun); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReleaseDeliveries(ctx, key, "p", liveRun); err != nil { // run 9 live, run 7 ended; run 8 never reset
		t.Fatal(err)
	}
	live := append(append(lease(liveRun, 1), lease(liveRun, 2)...), lease(liveRun, 3)...)
	if len(live) != 9 {
		t.Fatalf("the live run leased %v, want all 9 pages", live)
	}
	if got := lease(lateRun, 1); len(got) != 0 {
		t.Errorf("a late lease of run 8 took %v: the live run's batches, in flight", got)
	}
	if again := lease(liveRun, 1); fmt.Sprint(again) != fmt.Sprint(live[:3]) {
		t.Errorf("the live run's first batch asked again holds %v, want %v", again, live[:3])
	}
}

// TestFailedChildsBatchesGoBack: the batches of a ProcessBatch child that
// failed or was terminated (all its leases, told apart by their low 8
// bits) return to pending; a live child's stay where they are.
func TestFailedChildsBatchesGoBack(t *testing.T) {
	s := harness.OpenStore(t)
	key, _ := queueForProcessor(t, s, 9)
	const run = int64(9)
	if _, err := s.ReleaseDeliveries(ctx, key, "p", run); err != nil {
		t.Fatal(err)
	}
	lease := runLeases(t, s, key)
	failed := append(lease(run, 1<<8|0), lease(run, 1<<8|1)...) // child 1: two batches
	live := lease(run, 2<<8|0)                                  // child 2
	if len(failed) != 6 || len(live) != 3 {
		t.Fatalf("children leased %v and %v, want 6 and 3", failed, live)
	}
	n, err := s.ReleaseChildLeases(ctx, key, "p", []int64{run<<32 | 1<<8})
	if err != nil || n != 6 {
		t.Fatalf("released %d pages (%v), want child 1's 6", n, err)
	}
	if again := lease(run, 3<<8); fmt.Sprint(again) != fmt.Sprint(failed[:3]) {
		t.Errorf("the next child leased %v, want the failed child's first pages %v", again, failed[:3])
	}
	if kept := lease(run, 2<<8|0); fmt.Sprint(kept) != fmt.Sprint(live) {
		t.Errorf("the live child's batch holds %v, want %v", kept, live)
	}
}

// TestResetWaitsForTheLeaseUnderWay: a lease under way when the next run
// resets (the ended run's batch, cut off at continue-as-new in the middle
// of its lease) commits first, and the reset returns what it took.
func TestResetWaitsForTheLeaseUnderWay(t *testing.T) {
	s := harness.OpenStore(t)
	key, _ := queueForProcessor(t, s, 6)
	const oldRun, newRun = int64(7), int64(9)
	if _, err := s.ReleaseDeliveries(ctx, key, "p", oldRun); err != nil {
		t.Fatal(err)
	}
	ids, end, err := s.LeaseUnderWay(ctx, store.Lease{CampaignKey: key, CampaignID: "c", Processor: "p", ID: oldRun<<32 | 1}, 3)
	if err != nil || len(ids) != 3 {
		t.Fatalf("the lease under way took %v (%v), want 3 pages", ids, err)
	}
	t.Cleanup(func() { _ = end(false) }) // a failed test's open lease would hold the store's Close
	type released struct {
		n   int
		err error
	}
	done := make(chan released, 1)
	go func() {
		n, err := s.ReleaseDeliveries(ctx, key, "p", newRun)
		done <- released{n, err}
	}()
	harness.Eventually(t, 30*time.Second, "the reset to wait for the lease under way", func() bool {
		select {
		case r := <-done:
			t.Fatalf("the reset ended (%d pages, %v) while a lease was under way", r.n, r.err)
		default:
		}
		waits, err := s.WaitsForLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return waits
	})
	if err := end(true); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil || r.n != 3 {
			t.Errorf("the reset released %d pages (%v), want the 3 the lease under way took", r.n, r.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the reset did not end within 30 s of the lease's commit")
	}
}
