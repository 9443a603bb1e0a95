package store_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/crawl"
	"github.com/spiderpool/spiderpool/store"
	"github.com/spiderpool/spiderpool/tests/harness"
)

// Reasons links are recorded as excluded for.
var (
	tooDeep     = string(crawl.TooDeep)
	tooLong     = string(crawl.TooLong)
	redirectCap = "redirect chain longer than limits.max_redirects (5)"
)

// link is a link to raw found on page parent at depth, queued unless
// excludedBecause says why not.
func link(t *testing.T, raw string, depth int, parent int64, excludedBecause string) store.NewURL {
	t.Helper()
	l := urls(t, raw)[0]
	l.Depth, l.ParentID, l.ExcludedBecause = depth, parent, excludedBecause
	return l
}

// frontierRow is what the frontier holds for one URL.
type frontierRow struct {
	State     string
	Depth     int
	Parent    int64
	LastError string
	Finished  bool
	Due       bool
}

func rowOf(t *testing.T, s *store.Store, key int64, raw string) frontierRow {
	t.Helper()
	u, err := crawl.Canonicalize(raw)
	if err != nil {
		t.Fatal(err)
	}
	var r frontierRow
	err = s.Pool().QueryRow(ctx, `
		SELECT state::text, depth, coalesce(parent_id, 0), coalesce(last_error, ''),
		       finished_at IS NOT NULL, next_attempt_at <= now()
		FROM frontier WHERE campaign = $1 AND url = $2`, key, u.String).
		Scan(&r.State, &r.Depth, &r.Parent, &r.LastError, &r.Finished, &r.Due)
	if err != nil {
		t.Fatalf("read the frontier row of %s: %v", raw, err)
	}
	return r
}

func insert(t *testing.T, s *store.Store, key int64, links ...store.NewURL) int {
	t.Helper()
	n, err := s.InsertURLs(ctx, key, links)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestShallowerLinkReadmitsTooDeepURL: a URL first found past max_depth is
// not lost when a link within max_depth to it turns up later.
func TestShallowerLinkReadmitsTooDeepURL(t *testing.T) {
	s := harness.OpenStore(t)
	key := newCampaign(t, s, "http://a.test/")
	const deep = "http://a.test/deep"
	if n := insert(t, s, key, link(t, deep, 5, 50, tooDeep)); n != 1 {
		t.Fatalf("first link inserted %d rows, want 1", n)
	}
	want := frontierRow{State: store.Excluded, Depth: 5, Parent: 50, LastError: tooDeep, Finished: true, Due: true}
	if got := rowOf(t, s, key, deep); got != want {
		t.Fatalf("too deep a link: %+v, want %+v", got, want)
	}
	// Shallower but still too deep: nothing to re-admit.
	insert(t, s, key, link(t, deep, 4, 40, tooDeep))
	if got := rowOf(t, s, key, deep); got != want {
		t.Fatalf("after a still too deep link: %+v, want %+v", got, want)
	}
	// Within max_depth: queued at the new depth, and not counted as new.
	if n := insert(t, s, key, link(t, deep, 1, 10, "")); n != 0 {
		t.Fatalf("re-admitting counted %d new URLs, want 0", n)
	}
	want = frontierRow{State: store.Pending, Depth: 1, Parent: 10, Due: true}
	if got := rowOf(t, s, key, deep); got != want {
		t.Fatalf("after a link within max_depth: %+v, want %+v", got, want)
	}
	if l := leaseAll(t, s, key, 10); l.Size() != 1 {
		t.Fatalf("lease took %d URLs, want the re-admitted one", l.Size())
	}
}

// TestShallowerLinkLowersPendingDepth: a queued URL takes the depth of
// its shallowest link, so leasing goes breadth first and its own links
// are measured from there.
func TestShallowerLinkLowersPendingDepth(t *testing.T) {
	s := harness.OpenStore(t)
	key := newCampaign(t, s, "http://a.test/")
	const p = "http://a.test/p"
	insert(t, s, key, link(t, p, 4, 40, ""))
	if n := insert(t, s, key, link(t, p, 2, 20, "")); n != 0 {
		t.Fatalf("lowering counted %d new URLs, want 0", n)
	}
	want := frontierRow{State: store.Pending, Depth: 2, Parent: 20, Due: true}
	if got := rowOf(t, s, key, p); got != want {
		t.Fatalf("after a shallower link: %+v, want %+v", got, want)
	}
	insert(t, s, key, link(t, p, 3, 30, ""))
	if got := rowOf(t, s, key, p); got != want {
		t.Fatalf("after a deeper link: %+v, want %+v", got, want)
	}
	// An excluded link (a redirect chain past its cap) is no path to crawl by.
	insert(t, s, key, link(t, p, 1, 10, redirectCap))
	if got := rowOf(t, s, key, p); got != want {
		t.Fatalf("after an excluded shallower link: %+v, want %+v", got, want)
	}
	// Two links to one new URL in one batch: the shallower wins, whichever
	// comes first.
	const q = "http://a.test/q"
	if n := insert(t, s, key, link(t, q, 3, 30, ""), link(t, q, 1, 10, "")); n != 1 {
		t.Fatalf("inserted %d, want 1", n)
	}
	if got := rowOf(t, s, key, q); got.Depth != 1 || got.Parent != 10 {
		t.Fatalf("two links in one batch: %+v, want depth 1 from page 10", got)
	}
}

// TestShallowerLinkLeavesOtherRowsAlone: only pending URLs and URLs
// excluded as too deep take a shallower depth; a URL excluded for another
// reason, or being or already fetched, keeps its row as it is.
func TestShallowerLinkLeavesOtherRowsAlone(t *testing.T) {
	s := harness.OpenStore(t)
	key := newCampaign(t, s, "http://a.test/")
	const fetched, leased, failed = "http://a.test/fetched", "http://a.test/leased", "http://a.test/failed"
	insert(t, s, key, link(t, fetched, 3, 30, ""), link(t, leased, 3, 30, ""), link(t, failed, 3, 30, ""))
	l := leaseAll(t, s, key, 10)
	n := holder(t, s, "n", "1")
	claimed, err := s.Claim(ctx, key, l.LeaseID, ids(l), n, "n", time.Minute)
	if err != nil || len(claimed) != 3 {
		t.Fatalf("claimed %d (%v), want 3", len(claimed), err)
	}
	id := map[string]int64{}
	for _, c := range claimed {
		id[c.URL] = c.ID
	}
	page := &store.Page{Status: 200, ContentType: "text/html", FetchedAt: time.Now()}
	if _, err := s.Commit(ctx, key, n, "n", []store.Outcome{
		{ID: id[fetched], State: store.Fetched, Attempted: true, Status: 200, Page: page},
		{ID: id[failed], State: store.Failed, Attempted: true, Status: 404, Error: "HTTP 404"},
	}, nil); err != nil {
		t.Fatal(err)
	}
	const long, redirected = "http://a.test/long", "http://a.test/redirected"
	insert(t, s, key, link(t, long, 5, 50, tooLong), link(t, redirected, 5, 50, redirectCap))

	before := map[string]frontierRow{}
	all := []string{fetched, leased, failed, long, redirected}
	for _, u := range all {
		before[u] = rowOf(t, s, key, u)
	}
	var again []store.NewURL
	for _, u := range all {
		again = append(again, link(t, u, 1, 10, ""))
	}
	if n := insert(t, s, key, again...); n != 0 {
		t.Fatalf("known URLs counted %d new, want 0", n)
	}
	for _, u := range all {
		if got := rowOf(t, s, key, u); got != before[u] {
			t.Errorf("%s changed by a shallower link: %+v, was %+v", u, got, before[u])
		}
	}
	if r := before[long]; r.State != store.Excluded || r.LastError != tooLong {
		t.Errorf("too long a URL: %+v, want excluded as %q", r, tooLong)
	}
}

// TestConcurrentLinksKeepShallowestDepth has several batches commit links
// to the same URLs at once, at different depths, some too deep: each URL
// ends queued at its shallowest depth, counted new once, and no
// statement deadlocks.
func TestConcurrentLinksKeepShallowestDepth(t *testing.T) {
	s := harness.OpenStore(t)
	key := newCampaign(t, s, "http://a.test/")
	const workers, maxDepth = 8, 3
	var raw []string
	for i := range 200 {
		raw = append(raw, fmt.Sprintf("http://h%d.test/p%d", i%5, i))
	}
	depth := func(w, i int) int { return 1 + (i*7+w*3)%6 }
	shallowest := map[string]int{} // canonical URL -> least depth of its links
	for i, l := range urls(t, raw...) {
		shallowest[l.URL] = depth(0, i)
		for w := range workers {
			shallowest[l.URL] = min(shallowest[l.URL], depth(w, i))
		}
	}
	var wg sync.WaitGroup
	// The commits run under a deadline, so wg.Wait ends even if one hangs.
	commitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	found := make([]int, workers)
	errs := make([]error, workers)
	for w := range workers {
		links := urls(t, raw...)
		for i := range links {
			links[i].Depth, links[i].ParentID = depth(w, i), int64(100+w)
			if links[i].Depth > maxDepth {
				links[i].ExcludedBecause = tooDeep
			}
		}
		// Each worker submits the links in a different order.
		for i := range links {
			j := (i*(w+3) + w) % len(links)
			links[i], links[j] = links[j], links[i]
		}
		wg.Go(func() {
			res, err := s.Commit(commitCtx, key, fmt.Sprintf("w%d", w), "n", nil, links)
			found[w], errs[w] = res.Discovered, err
		})
	}
	wg.Wait()
	for w, err := range errs {
		if err != nil {
			t.Fatalf("worker %d: %v", w, err)
		}
	}
	if sum := sumOf(found); sum != len(raw) {
		t.Fatalf("links counted new %d times in all, want exactly %d", sum, len(raw))
	}
	rows, err := s.Pool().Query(ctx, `SELECT url, state::text, depth FROM frontier WHERE campaign = $1`, key)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var bad []string
	for rows.Next() {
		var (
			u, state string
			d        int
		)
		if err := rows.Scan(&u, &state, &d); err != nil {
			t.Fatal(err)
		}
		if state != store.Pending || d != shallowest[u] {
			bad = append(bad, fmt.Sprintf("%s %s at depth %d, want pending at %d", u, state, d, shallowest[u]))
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		t.Fatalf("%d of %d URLs not at their shallowest depth, e.g. %s", len(bad), len(raw), bad[0])
	}
}

func sumOf(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// TestInsertedPriorityLeasesFirst: a URL inserted with a priority (a rule
// of the spec, a sitemap's <priority>) is leased before its host's other
// pending URLs, however late it was found, and one below 0 after them.
func TestInsertedPriorityLeasesFirst(t *testing.T) {
	s := harness.OpenStore(t)
	key := newCampaign(t, s, "http://p.test/")
	in := urls(t, "http://p.test/a", "http://p.test/b", "http://p.test/low", "http://p.test/high")
	in[2].Priority, in[3].Priority = -4, 10
	if _, err := s.InsertURLs(ctx, key, in); err != nil {
		t.Fatal(err)
	}
	n := holder(t, s, "n", "1")
	var got []string
	for range 4 {
		l := leaseAll(t, s, key, 1)
		leased := ids(l)
		if len(leased) != 1 {
			t.Fatalf("lease %v, want one URL", leased)
		}
		var url string
		if err := s.Pool().QueryRow(ctx, `SELECT url FROM frontier WHERE id = $1`, leased[0]).Scan(&url); err != nil {
			t.Fatal(err)
		}
		got = append(got, url)
		settle(t, s, key, l.LeaseID, leased, n) // the host's quota is 1
	}
	if got[0] != "http://p.test/high" || got[3] != "http://p.test/low" || !slices.Contains(got[1:3], "http://p.test/a") {
		t.Errorf("leased %q, want /high first, /a and /b, then /low", got)
	}
}
