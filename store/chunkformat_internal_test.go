package store

import (
	"bytes"
	"encoding/json"
	"fmt"
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
