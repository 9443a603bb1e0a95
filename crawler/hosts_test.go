package crawler

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/fetch"
	"github.com/spiderpool/spiderpool/store"
)

func testHost() *host {
	t := newHostTable("n@1", nil, slog.New(slog.DiscardHandler))
	return t.get("x.test")
}

// TestStrictestCampaignPacesTheHost: the delay and concurrency a host
// keeps are the strictest among the campaigns with URLs on it and the
// running campaigns anywhere (its policy), and a stricter delay arriving
// pushes the next start back.
func TestStrictestCampaignPacesTheHost(t *testing.T) {
	h := testHost()
	h.enter(1, time.Second, 2)
	h.mu.Lock()
	if d, n := h.delayLocked(), h.limitLocked(); d != time.Second || n != 2 {
		t.Fatalf("one campaign: delay %v limit %d", d, n)
	}
	h.last = time.Now()
	h.next = h.last.Add(spacing(time.Second, 0))
	h.mu.Unlock()
	h.setPolicy(store.HostPolicy{MinDelay: 2 * time.Second, Concurrency: 1})
	h.mu.Lock()
	d, n, wait := h.delayLocked(), h.limitLocked(), time.Until(h.next)
	h.mu.Unlock()
	if d != 2*time.Second || n != 1 || wait < 1900*time.Millisecond {
		t.Fatalf("with a stricter campaign elsewhere: delay %v limit %d next in %v; want 2s, 1, about 2s", d, n, wait)
	}
	h.enter(2, 3*time.Second, 4)
	h.mu.Lock()
	d = h.delayLocked()
	h.mu.Unlock()
	if d != 3*time.Second {
		t.Fatalf("a campaign with URLs here asks 3s, delay is %v", d)
	}
}

// TestLatencyIsLearned feeds the estimate leasing sizes a host's work by.
func TestLatencyIsLearned(t *testing.T) {
	h := testHost()
	for range 20 {
		h.observe(context.Background(), &fetch.Response{Status: 200, Duration: time.Second}, time.Minute)
	}
	if h.learned.Latency < 900*time.Millisecond || h.learned.Latency > 1100*time.Millisecond {
		t.Fatalf("latency %v after answers of a second", h.learned.Latency)
	}
}

// TestGapCountsFromTheWire: a request that went out late (a dial, a busy
// machine) moves the host's next start, so the host never sees two
// requests closer than its delay.
func TestGapCountsFromTheWire(t *testing.T) {
	h := testHost()
	h.enter(1, time.Second, 1)
	h.last = time.Now()
	h.next = h.last.Add(spacing(time.Second, 0))
	wrote := h.last.Add(300 * time.Millisecond)
	h.observe(context.Background(), &fetch.Response{Status: 200, Duration: time.Second, ReachedBy: wrote}, time.Minute)
	if min := wrote.Add(time.Second); h.next.Before(min) {
		t.Fatalf("next start %v after a request written at %v, want at least %v", h.next, wrote, min)
	}
}

// TestNoTurnWhileARequestIsUnanchored: with a delay, a host that allows
// two requests at once grants no second turn while the first request is
// not known to have reached the host (its first answer byte, or its
// failure), however long ago its turn began: the second must reach the
// host a delay after the first did. Once anchored, the next start counts
// from the anchor. Without a delay nothing waits.
func TestNoTurnWhileARequestIsUnanchored(t *testing.T) {
	const delay = 50 * time.Millisecond
	yes, stop := func() bool { return true }, make(chan struct{})
	for _, d := range []time.Duration{delay, 0} {
		h := testHost()
		h.enter(1, d, 2)
		h.mu.Lock()
		h.claimed, h.renewed = true, time.Now()
		h.mu.Unlock()
		if got := h.pace(context.Background(), stop, yes, func() {}); got != turnTaken {
			t.Fatalf("delay %v: first turn %v", d, got)
		}
		h.mu.Lock()
		h.next = time.Now().Add(-time.Hour) // its pace alone would allow the next now
		_, anchored := h.dueLocked()
		h.mu.Unlock()
		if d > 0 && anchored {
			t.Fatalf("delay %v: a second turn may start while the first request's anchor is unknown", d)
		}
		if d == 0 && !anchored {
			t.Fatal("no delay: a second turn waits for the first request's anchor")
		}
		firstByte := time.Now()
		h.reached(firstByte)
		h.mu.Lock()
		next, anchored := h.dueLocked()
		h.mu.Unlock()
		if !anchored || next.Before(firstByte.Add(d)) {
			t.Fatalf("delay %v: after the first byte at %v, next start %v (known %v), want at least a delay later",
				d, firstByte.Format(time.StampMicro), next.Format(time.StampMicro), anchored)
		}
	}
}

// TestStricterDelayCountsFromWhenTheHostHadTheRequest: a robots.txt
// fetched with no delay that asks for a Crawl-delay paces the next request
// from when the host surely had the robots.txt request (its answer's first
// byte), not from when the request started: the host took it in later, by
// as long as the request took to reach it.
func TestStricterDelayCountsFromWhenTheHostHadTheRequest(t *testing.T) {
	h := testHost()
	h.enter(1, 0, 1)
	start := time.Now().Add(-time.Minute) // fixed instants: no clock is read below
	reached := start.Add(40 * time.Millisecond)
	h.mu.Lock()
	h.last, h.next, h.unanchored = start, start, 1
	h.mu.Unlock()
	h.reached(reached)
	h.setCrawlDelay(time.Second)
	h.mu.Lock()
	next := h.next
	h.mu.Unlock()
	if want := reached.Add(time.Second); next.Before(want) {
		t.Fatalf("next start %v after the robots.txt request reached the host; want at least a second",
			next.Sub(reached))
	}
}

// TestAHostRunsItsBatchesInTurn: a host's URLs come off its queue in
// batch order, whatever order the batches were claimed in.
func TestAHostRunsItsBatchesInTurn(t *testing.T) {
	q := &hostQueue{byCampaign: map[int64][]*item{}}
	b1 := &batch{key: 7, req: campaign.FetchBatchRequest{Batch: 1}}
	b2 := &batch{key: 7, req: campaign.FetchBatchRequest{Batch: 2}}
	for _, it := range []*item{
		{url: store.ClaimedURL{ID: 21}, batch: b2}, {url: store.ClaimedURL{ID: 22}, batch: b2},
		{url: store.ClaimedURL{ID: 11}, batch: b1}, {url: store.ClaimedURL{ID: 12}, batch: b1},
	} {
		q.push(it)
	}
	var got []int64
	for it := q.pop(); it != nil; it = q.pop() {
		got = append(got, it.url.ID)
	}
	if !slices.Equal(got, []int64{11, 12, 21, 22}) {
		t.Fatalf("popped %v, want batch 1's URLs (11, 12) first, then batch 2's", got)
	}
}
