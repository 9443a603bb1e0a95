package activities

import (
	"testing"

	"github.com/spiderpool/spiderpool/store"
)

func TestSeenTableNeverRemembersWhatWasNotAdded(t *testing.T) {
	var tbl seenTable
	for fp := uint64(1); fp <= 1000; fp++ {
		tbl.add(fp * 0x9e3779b97f4a7c15)
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
	tbl.add(a)
	tbl.add(b)
	tbl.add(c)
	if !tbl.has(c) {
		t.Fatal("newest fingerprint not kept")
	}
	if tbl.has(a) && tbl.has(b) {
		t.Fatal("two ways hold three fingerprints")
	}
}

func TestUnseenKeepsOnlyUnknownLinks(t *testing.T) {
	var tbl seenTable
	tbl.add(7)
	got := tbl.unseen([]store.NewURL{{Fingerprint: 7}, {Fingerprint: 8}, {Fingerprint: 7}, {Fingerprint: 9}})
	if len(got) != 2 || got[0].Fingerprint != 8 || got[1].Fingerprint != 9 {
		t.Fatalf("unseen = %+v, want fingerprints 8 and 9", got)
	}
}
