package store_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/store"
	"github.com/spiderpool/spiderpool/tests/harness"
)

// TestHistoryFollowsVersions: a URL's history through the visits of a
// series. Its first version sets first seen; the same digest again is no
// change and lengthens the interval by 40% (from at least min); a 304
// keeps the validators, digest and links; a new digest is a change, and
// shortens the interval by 20%; a 410 marks it gone (due at the next
// run), and a version after that revives it. The run that fetched the
// last version is kept for its items: a 304 keeps it, a gone URL has
// none.
func TestHistoryFollowsVersions(t *testing.T) {
	s := harness.OpenStore(t)
	series := t.Name()
	const fp = int64(42)
	min, max := time.Hour, 10*time.Hour
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	run := func(hours int) int64 { return int64(100 + hours) } // the campaign of each visit
	visit := func(v store.Visit, hours int) *store.URLHistory {
		t.Helper()
		v.Fingerprint, v.URL, v.At, v.Run = fp, "http://a/p", t0.Add(time.Duration(hours)*time.Hour), run(hours)
		if err := s.RecordVisits(ctx, series, min, max, []store.Visit{v}); err != nil {
			t.Fatal(err)
		}
		got, err := s.History(ctx, series, []int64{fp, 7})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 {
			t.Fatalf("history of %d URLs, want 1", len(got))
		}
		return got[fp]
	}
	check := func(step string, h *store.URLHistory, etag, digest string, changes int, interval time.Duration, gone bool, versionRun int64) {
		t.Helper()
		if h.ETag != etag || h.Digest != digest || h.Changes != changes || h.Interval != interval || h.Gone != gone ||
			!h.FirstSeen.Equal(t0) || h.VersionRun != versionRun {
			t.Errorf("%s: %+v\n  want etag %s digest %s changes %d interval %s gone %v first seen %s version run %d",
				step, h, etag, digest, changes, interval, gone, t0, versionRun)
		}
	}
	v1 := store.Visit{Kind: store.VisitFetched, Status: 200, ETag: `"1"`, Digest: "d1", Links: []string{"http://a/x"}}
	h := visit(v1, 0)
	check("first version", h, `"1"`, "d1", 0, 0, false, run(0))
	if !h.Due(t0) || !slices.Equal(h.Links, []string{"http://a/x"}) {
		t.Errorf("first version: due %v, links %q", h.Due(t0), h.Links)
	}
	h = visit(v1, 1)
	check("same digest", h, `"1"`, "d1", 0, 84*time.Minute, false, run(1))
	if h.Due(t0.Add(2*time.Hour)) || !h.Due(t0.Add(1*time.Hour+84*time.Minute)) {
		t.Errorf("fetched at 1h, interval 84m: due at 2h %v, at 2h24m %v; want false, true", h.Due(t0.Add(2*time.Hour)), h.Due(t0.Add(1*time.Hour+84*time.Minute)))
	}
	h = visit(store.Visit{Kind: store.VisitNotModified, Status: 304}, 3)
	check("not modified", h, `"1"`, "d1", 0, 7056*time.Second, false, run(1))
	if !slices.Equal(h.Links, []string{"http://a/x"}) || !h.LastChanged.Equal(t0) {
		t.Errorf("not modified: links %q, last changed %s; want the first version's", h.Links, h.LastChanged)
	}
	h = visit(store.Visit{Kind: store.VisitFetched, Status: 200, ETag: `"2"`, Digest: "d2", Links: []string{"http://a/y"}}, 5)
	check("changed", h, `"2"`, "d2", 1, 5645*time.Second, false, run(5)) // 7056 s x 0.8
	if !h.LastChanged.Equal(t0.Add(5*time.Hour)) || !slices.Equal(h.Links, []string{"http://a/y"}) {
		t.Errorf("changed: last changed %s, links %q", h.LastChanged, h.Links)
	}
	h = visit(store.Visit{Kind: store.VisitGone, Status: 410}, 6)
	check("gone", h, `"2"`, "d2", 1, 5645*time.Second, true, 0)
	// A gone URL is due at the next run, whatever its interval: its old
	// links are not fed to the crawl for up to max_interval.
	if !h.Due(t0.Add(6*time.Hour + time.Minute)) {
		t.Errorf("gone at 6h: not due at 6h01m; a gone URL is due at the next run")
	}
	h = visit(store.Visit{Kind: store.VisitFetched, Status: 200, ETag: `"3"`, Digest: "d2"}, 7)
	check("back, same digest", h, `"3"`, "d2", 1, 7903*time.Second, false, run(7))
	for i, d := range []string{"d3", "d4", "d5", "d6"} {
		h = visit(store.Visit{Kind: store.VisitFetched, Status: 200, Digest: d}, 8+i)
	}
	check("changed 4 times more", h, "", "d6", 5, time.Hour, false, run(11)) // 7903 s x 0.8^4 is under min
}

// TestSitemapLastModMakesAURLDue: a URL not due by its interval is due
// once a sitemap gives it a lastmod after its last fetch, and not for an
// older one; a URL a sitemap names first is due, and its first version
// starts its history as any other's.
func TestSitemapLastModMakesAURLDue(t *testing.T) {
	s := harness.OpenStore(t)
	series := t.Name()
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second)
	for _, at := range []time.Duration{0, time.Minute} { // two unchanged fetches: interval 84m
		if err := s.RecordVisits(ctx, series, time.Hour, 10*time.Hour, []store.Visit{{Fingerprint: 1, URL: "http://a/1",
			Kind: store.VisitFetched, Status: 200, Digest: "d", At: t0.Add(at)}}); err != nil {
			t.Fatal(err)
		}
	}
	history := func(fp int64) *store.URLHistory {
		t.Helper()
		h, err := s.History(ctx, series, []int64{fp})
		if err != nil || h[fp] == nil {
			t.Fatalf("history of %d: %v %v", fp, h, err)
		}
		return h[fp]
	}
	now := time.Now()
	if history(1).Due(now) {
		t.Fatalf("fetched a minute after %s with interval %s: due already", t0, history(1).Interval)
	}
	note := func(fp int64, at time.Time) {
		t.Helper()
		if err := s.NoteSitemapLastMods(ctx, series, []store.SitemapLastMod{{Fingerprint: fp, URL: fmt.Sprintf("http://a/%d", fp), LastMod: at}}); err != nil {
			t.Fatal(err)
		}
	}
	note(1, t0.Add(-time.Hour))
	if history(1).Due(now) {
		t.Error("due after a lastmod older than its last fetch")
	}
	note(1, t0.Add(30*time.Minute))
	if !history(1).Due(now) {
		t.Error("not due after a lastmod newer than its last fetch")
	}
	note(2, t0)
	if h := history(2); !h.Due(now) || h.Digest != "" {
		t.Errorf("a URL a sitemap names first: %+v, want due with no version", h)
	}
	if err := s.RecordVisits(ctx, series, time.Hour, 10*time.Hour, []store.Visit{{Fingerprint: 2, URL: "http://a/2",
		Kind: store.VisitFetched, Status: 200, Digest: "d2", At: now}}); err != nil {
		t.Fatal(err)
	}
	if h := history(2); h.Interval != 0 || h.Changes != 0 || h.Digest != "d2" {
		t.Errorf("its first version: %+v, want interval 0, no change", h)
	}
}
