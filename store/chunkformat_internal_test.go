package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestChunkReadsBackAsWritten: a chunk's pages read back as they were
// kept, and a chunk cut short anywhere (or of a format this node does not
// know) is an error, never a page made up.
func TestChunkReadsBackAsWritten(t *testing.T) {
	at := time.UnixMicro(1_765_000_000_123_456)
	pages := []chunkPage{
		{ID: 7, URL: "http://a.test/", Depth: 0, Final: "http://a.test/", Status: 200, Header: json.RawMessage(`{"Etag":["x"]}`),
			CType: "text/html", At: at, SHA256: "ab", body: []byte("<p>one</p>")},
		{ID: 1 << 40, URL: "http://a.test/ü", Depth: 3, Final: "http://b.test/", Status: 404, Header: json.RawMessage(`{}`),
			At: at.Add(time.Second), body: nil},
		{ID: 9, URL: "", Depth: 1, Status: 200, Header: json.RawMessage(`{}`), At: at, body: bytes.Repeat([]byte{0, 1}, 3000)},
	}
	blob := encodeChunk(pages)
	got, err := decodeChunk(blob)
	if err != nil {
		t.Fatal(err)
	}
	show := func(ps []chunkPage) string {
		var b bytes.Buffer
		for _, p := range ps {
			fmt.Fprintf(&b, "%d %q %d %q %d %s %q %s %q %x\n", p.ID, p.URL, p.Depth, p.Final, p.Status, p.Header, p.CType,
				p.At.UTC().Format(time.RFC3339Nano), p.SHA256, p.body)
		}
		return b.String()
	}
	if show(got) != show(pages) {
		t.Errorf("read back:\n%s\nwant:\n%s", show(got), show(pages))
	}
	for n := range len(blob) {
		if _, err := decodeChunk(blob[:n]); err == nil {
			t.Fatalf("a chunk cut to %d of %d bytes read without an error", n, len(blob))
		}
	}
	other := append([]byte{chunkFormat + 1}, blob[1:]...)
	if _, err := decodeChunk(other); err == nil {
		t.Error("a chunk of an unknown format read without an error")
	}
}

// TestChunkFlagsFollowTheBodies: a rendered page's flag is kept after the
// bodies, where nodes of the previous release stop reading: a chunk
// without a flag set is laid out as before, one with flags is the same
// bytes up to the bodies' end (so those nodes read the same pages from
// it), and a node of this release reads the flags back, reads a chunk
// without them as unflagged, refuses flags cut short and ignores bytes
// after them (room for flags to come).
func TestChunkFlagsFollowTheBodies(t *testing.T) {
	at := time.UnixMicro(1_765_000_000_123_456)
	pages := []chunkPage{
		{ID: 3, URL: "http://app.test/view/1", Final: "http://app.test/view/1", Status: 200, Header: json.RawMessage(`{}`),
			CType: "text/html", At: at, SHA256: "cd", Rendered: true, body: []byte(`<div id="root">Loading…</div>`)},
		{ID: 4, URL: "http://app.test/doc/1", Status: 200, Header: json.RawMessage(`{}`), CType: "text/html", At: at,
			body: []byte("<h1>doc</h1>")},
	}
	plain := slices.Clone(pages)
	plain[0].Rendered = false
	before, flagged := encodeChunk(plain), encodeChunk(pages)
	if len(flagged) != len(before)+len(pages) || !bytes.Equal(flagged[:len(before)], before) {
		t.Fatalf("flagged chunk %x, want the unflagged chunk %x and a byte per page", flagged, before)
	}
	rendered := func(ps []chunkPage) []bool {
		var out []bool
		for _, p := range ps {
			out = append(out, p.Rendered)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		blob []byte
		want []bool
	}{
		{"flagged", flagged, []bool{true, false}},
		{"without flags", before, []bool{false, false}},
		{"with bytes after the flags", append(slices.Clone(flagged), 0xff, 0x01), []bool{true, false}},
	} {
		got, err := decodeChunk(tc.blob)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if !slices.Equal(rendered(got), tc.want) || string(got[0].body) != string(pages[0].body) || got[1].URL != pages[1].URL {
			t.Errorf("%s: rendered %v, pages %+v; want %v and the pages as kept", tc.name, rendered(got), got, tc.want)
		}
	}
	if _, err := decodeChunk(flagged[:len(flagged)-1]); err == nil {
		t.Error("a chunk whose flags are cut short read without an error")
	}
}
