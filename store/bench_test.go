package store_test

import (
	"fmt"
	"testing"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/crawl"
	"github.com/spiderpool/spiderpool/store"
	"github.com/spiderpool/spiderpool/tests/harness"
)

// BenchmarkInsertLinks is the dedup upsert as a fetch batch does it: 64
// pages' worth of links (20 each), most already in the frontier.
func BenchmarkInsertLinks(b *testing.B) {
	s := harness.OpenStore(b)
	key, _, err := s.CreateCampaign(ctx, "bench", mustSpec(b))
	if err != nil {
		b.Fatal(err)
	}
	const perCommit = 64 * 20
	known := make([]store.NewURL, 0, 100_000)
	for i := range 100_000 {
		u, _ := crawl.Canonicalize(fmt.Sprintf("http://h%d.test/p/%d.html", i%50, i))
		known = append(known, store.NewURL{Fingerprint: u.Fingerprint(), URL: u.String, ShardKey: u.Host})
	}
	for i := 0; i < len(known); i += 5000 {
		if _, err := s.InsertURLs(ctx, key, known[i:min(i+5000, len(known))]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	next := 0
	for b.Loop() {
		batch := make([]store.NewURL, 0, perCommit)
		for j := range perCommit {
			if j%20 == 0 { // one link in twenty is new
				u, _ := crawl.Canonicalize(fmt.Sprintf("http://h%d.test/new/%d.html", next%50, next))
				batch = append(batch, store.NewURL{Fingerprint: u.Fingerprint(), URL: u.String, ShardKey: u.Host})
				next++
				continue
			}
			batch = append(batch, known[(next*7+j*13)%len(known)])
		}
		if _, err := s.InsertURLs(ctx, key, batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(perCommit), "links/op")
}

func mustSpec(tb testing.TB) campaign.Spec {
	tb.Helper()
	spec, err := campaign.Spec{Seeds: []string{"http://h0.test/"}}.Normalize()
	if err != nil {
		tb.Fatal(err)
	}
	return spec
}
