package store_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/tests/harness"
)

// TestResetReleasesOnlyOtherRunsLeases: a run's first lease returns to
// pending what earlier runs held (their batches may never come back),
// and never what batches of its own run hold, which run beside it.
func TestResetReleasesOnlyOtherRunsLeases(t *testing.T) {
	s := harness.OpenStore(t)
	key := politeCampaign(t, s, t.Name(), time.Second, 1, 1, 6)
	if _, err := s.Pool().Exec(ctx, `
		INSERT INTO page_bodies (url_id, campaign, final_url, status, headers, fetched_at, body, sha256, token)
		SELECT id, campaign, url, 200, '{}', now(), 'x', '', 'tok' || id FROM frontier WHERE campaign = $1`, key); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, `
		INSERT INTO deliveries (campaign, processor, url_id) SELECT campaign, 'p', id FROM frontier WHERE campaign = $1`, key); err != nil {
		t.Fatal(err)
	}
	const oldRun, newRun = int64(7), int64(9)
	lease := func(run, seq int64) []int64 {
		t.Helper()
		l, err := s.LeaseDeliveries(ctx, key, "p", run<<32|seq, 3, 1<<10, 1<<20, 100)
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for _, p := range l.Pages {
			ids = append(ids, p.ID)
		}
		return ids
	}
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

// TestBodiesByTokens: one query returns the kept bodies of many tokens, and
// leaves out a token that names none.
func TestBodiesByTokens(t *testing.T) {
	s := harness.OpenStore(t)
	key := politeCampaign(t, s, t.Name(), time.Second, 1, 1, 3)
	if _, err := s.Pool().Exec(ctx, `
		INSERT INTO page_bodies (url_id, campaign, final_url, status, headers, fetched_at, body, sha256, token)
		SELECT id, campaign, url, 200, '{}', now(), convert_to('body ' || id, 'UTF8'), '', 'ab' || id FROM frontier WHERE campaign = $1`, key); err != nil {
		t.Fatal(err)
	}
	var ids []int64
	if err := s.Pool().QueryRow(ctx, `SELECT array_agg(id ORDER BY id) FROM frontier WHERE campaign = $1`, key).Scan(&ids); err != nil {
		t.Fatal(err)
	}
	tokens := []string{fmt.Sprintf("ab%d", ids[2]), "ffff", fmt.Sprintf("ab%d", ids[0])}
	got, err := s.Bodies(ctx, tokens)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{tokens[0]: fmt.Sprintf("body %d", ids[2]), tokens[2]: fmt.Sprintf("body %d", ids[0])}
	if len(got) != len(want) {
		t.Errorf("got %d bodies, want %d", len(got), len(want))
	}
	for tok, body := range want {
		if string(got[tok]) != body {
			t.Errorf("body of %s: %q, want %q", tok, got[tok], body)
		}
	}
}
