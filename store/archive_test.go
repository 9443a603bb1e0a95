package store_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/spiderpool/spiderpool/archive"
	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/tests/harness"
)

func payload(digest string, n int) archive.Payload {
	return archive.Payload{Digest: digest, RecordID: fmt.Sprintf("<urn:uuid:%d>", n), URI: fmt.Sprintf("http://h/%d", n), Date: "2024-01-02T03:04:05Z"}
}

// TestOnePayloadOneOriginalAcrossNodes: claims of one payload racing from
// many nodes at once leave exactly one original, which every claimant is
// told; a payload of another campaign is that campaign's own.
func TestOnePayloadOneOriginalAcrossNodes(t *testing.T) {
	s := harness.OpenStore(t)
	key := newCampaign(t, s, "http://h/")
	const nodes = 8
	answers := make([][]archive.Payload, nodes)
	var wg sync.WaitGroup
	for n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			held, err := s.ClaimPayloads(ctx, key, []archive.Payload{payload("sha1:SAME", n), payload(fmt.Sprintf("sha1:OWN%d", n), 100+n)})
			if err != nil {
				t.Error(err)
			}
			answers[n] = held
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	orig := answers[0][0]
	won := 0
	for n, held := range answers {
		if held[0] != orig {
			t.Errorf("node %d was told %+v holds the payload, node 0 %+v", n, held[0], orig)
		}
		if held[0].RecordID == payload("", n).RecordID {
			won++
		}
		if held[1] != payload(fmt.Sprintf("sha1:OWN%d", n), 100+n) {
			t.Errorf("node %d: its own payload is held by %+v", n, held[1])
		}
	}
	if won != 1 {
		t.Errorf("%d claims won the shared payload, want exactly 1", won)
	}
	// Two claims of a new payload in one call: the first is the original.
	held, err := s.ClaimPayloads(ctx, key, []archive.Payload{payload("sha1:PAIR", 50), payload("sha1:PAIR", 51)})
	if err != nil || held[0] != payload("sha1:PAIR", 50) || held[1] != held[0] {
		t.Errorf("a pair in one call: %+v, %v; want both held by the first", held, err)
	}
	spec, err := campaign.Spec{Seeds: []string{"http://h/"}}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := s.CreateCampaign(ctx, t.Name()+"-other", spec)
	if err != nil {
		t.Fatal(err)
	}
	held, err = s.ClaimPayloads(ctx, other, []archive.Payload{payload("sha1:SAME", 99)})
	if err != nil || held[0] != payload("sha1:SAME", 99) {
		t.Errorf("another campaign's first copy is held by %+v, %v; want its own", held, err)
	}
	// A released claim (its record never written) is claimed afresh.
	if err := s.ReleasePayloads(ctx, key, []archive.Payload{orig}); err != nil {
		t.Fatal(err)
	}
	held, err = s.ClaimPayloads(ctx, key, []archive.Payload{payload("sha1:SAME", 77)})
	if err != nil || held[0] != payload("sha1:SAME", 77) {
		t.Errorf("after release: held by %+v, %v; want the new claim", held, err)
	}
	if id, err := s.CampaignID(ctx, key); err != nil || id != t.Name() {
		t.Errorf("CampaignID = %q, %v; want %q", id, err, t.Name())
	}
}
