package crawler

import (
	"testing"

	"github.com/spiderpool/spiderpool/store"
)

func (t *seenTable) has(fp uint64) bool {
	_, ok := t.lookup(fp)
	return ok
}

func queued(fp uint64, depth int) store.NewURL { return store.NewURL{Fingerprint: fp, Depth: depth} }

func excluded(fp uint64, depth int) store.NewURL {
	return store.NewURL{Fingerprint: fp, Depth: depth, ExcludedBecause: "deeper than limits.max_depth"}
}

func TestSeenTableNeverRemembersWhatWasNotAdded(t *testing.T) {
	var tbl seenTable
	for fp := uint64(1); fp <= 1000; fp++ {
		tbl.add(queued(fp*0x9e3779b97f4a7c15, 1))
	}
	for fp := uint64(1); fp <= 1000; fp++ {
		if !tbl.has(fp * 0x9e3779b97f4a7c15) {
			t.Fatalf("fingerprint %d forgotten with the table nearly empty", fp)
		}
	}
	for fp := uint64(1001); fp <= 2000; fp++ {
		if tbl.has(fp * 0x9e3779b97f4a7c15) {
			t.Fatalf("fingerprint %d remembered but never added", fp)
		}
	}
	if tbl.has(0) {
		t.Fatal("0 marks an empty slot and must never count as seen")
	}
}

func TestSeenTableForgetsRatherThanGrows(t *testing.T) {
	var tbl seenTable
	// Three fingerprints for one pair of slots: the third overwrites.
	a, b, c := uint64(seenSlots*1+4), uint64(seenSlots*2+4), uint64(seenSlots*3+4)
	tbl.add(queued(a, 1))
	tbl.add(queued(b, 1))
	tbl.add(queued(c, 1))
	if !tbl.has(c) {
		t.Fatal("newest fingerprint not kept")
	}
	if tbl.has(a) && tbl.has(b) {
		t.Fatal("two ways hold three fingerprints")
	}
}

func TestUnseenKeepsOnlyUnknownLinks(t *testing.T) {
	var tbl seenTable
	tbl.add(queued(7, 0))
	got := tbl.unseen([]store.NewURL{{Fingerprint: 7}, {Fingerprint: 8}, {Fingerprint: 7}, {Fingerprint: 9}})
	if len(got) != 2 || got[0].Fingerprint != 8 || got[1].Fingerprint != 9 {
		t.Fatalf("unseen = %+v, want fingerprints 8 and 9", got)
	}
}

// TestUnseenLetsShallowerLinksThrough: a link to a known URL goes to the
// frontier if it can lower the URL's depth, or queue it again.
func TestUnseenLetsShallowerLinksThrough(t *testing.T) {
	var tbl seenTable
	tbl.add(queued(7, 3))
	tbl.add(queued(7, 5)) // the least depth is kept
	tbl.add(excluded(9, 5))
	for _, tc := range []struct {
		link store.NewURL
		want bool
	}{
		{queued(7, 3), false},
		{queued(7, 4), false},
		{queued(7, 2), true},    // may lower the depth
		{excluded(7, 1), false}, // excluded links only insert
		{excluded(9, 6), false},
		{queued(9, 6), true}, // only excluded links before: may queue it
		{queued(9, 1), true},
	} {
		got := len(tbl.unseen([]store.NewURL{tc.link})) == 1
		if got != tc.want {
			t.Errorf("unseen(%+v) = %v, want %v", tc.link, got, tc.want)
		}
	}
	tbl.add(queued(9, 1))
	if len(tbl.unseen([]store.NewURL{queued(9, 2)})) != 0 {
		t.Error("a link deeper than one committed to a re-queued URL let through")
	}
	// The depth field takes bits the slot pair says: fingerprints in one
	// pair, apart only in bit 0, stay apart.
	var fresh seenTable
	fresh.add(queued(0x100, 0))
	if fresh.has(0x101) || !fresh.has(0x100) {
		t.Error("fingerprints 0x100 and 0x101 confused")
	}
}
