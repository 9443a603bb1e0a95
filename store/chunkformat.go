package store

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// How a chunk keeps its pages (encodeChunk, decodeChunk), and the body
// tokens that name a page in a chunk (chunkToken).

// chunkPage is one page of a chunk: its metadata and body.
type chunkPage struct {
	ID     int64
	URL    string
	Depth  int
	Final  string
	Status int
	Header json.RawMessage
	CType  string
	At     time.Time
	SHA256 string
	// Rendered: a browser rendered the page. Its body is the rendered
	// DOM, or in a chunk of originals (PageBody.OriginalFor) the
	// document as served.
	Rendered bool

	body       []byte
	processors []string // not kept: who gets it is in chunk_deliveries
}

// chunkFormat is the first byte of a chunk, naming how it is laid out.
const chunkFormat = 1

// encodeChunk is the bytes a chunk keeps: chunkFormat, the number of
// pages, each page's metadata (numbers as varints, strings and the
// header's JSON each after its length) with its body's length, then the
// bodies, in the same order, then, when some page has one, the flags
// (appendFlags). Encoded as JSON, the metadata took more of a node's
// time than the rest of keeping and reading the pages (0.4 s to encode
// and 0.6 s to decode per 70,000 pages, measured).
func encodeChunk(pages []chunkPage) []byte {
	n := 16
	for _, p := range pages {
		n += 64 + len(p.URL) + len(p.Final) + len(p.Header) + len(p.CType) + len(p.SHA256) + len(p.body)
	}
	out := append(make([]byte, 0, n), chunkFormat)
	out = binary.AppendUvarint(out, uint64(len(pages)))
	str := func(s []byte) { out = append(binary.AppendUvarint(out, uint64(len(s))), s...) }
	for _, p := range pages {
		out = binary.AppendVarint(out, p.ID)
		str([]byte(p.URL))
		out = binary.AppendVarint(out, int64(p.Depth))
		str([]byte(p.Final))
		out = binary.AppendVarint(out, int64(p.Status))
		str(p.Header)
		str([]byte(p.CType))
		out = binary.AppendVarint(out, p.At.UnixMicro())
		str([]byte(p.SHA256))
		out = binary.AppendUvarint(out, uint64(len(p.body)))
	}
	for _, p := range pages {
		out = append(out, p.body...)
	}
	return appendFlags(out, pages)
}

// Page flags, after a chunk's bodies. Nodes of v0.11.0 and this release
// before them stop reading at the bodies' end, so the flags are added
// without a new chunkFormat, and a chunk without them (every page
// unflagged, or written by such a node) reads with none set.
const flagRendered = 1 << iota

// appendFlags appends a byte of flags per page, in page order, when any
// page has one.
func appendFlags(out []byte, pages []chunkPage) []byte {
	if !slices.ContainsFunc(pages, func(p chunkPage) bool { return p.Rendered }) {
		return out
	}
	for _, p := range pages {
		var f byte
		if p.Rendered {
			f |= flagRendered
		}
		out = append(out, f)
	}
	return out
}

// minPageBytes is the least a page takes in a chunk: ten fields of a
// byte at least.
const minPageBytes = 10

// chunkReader reads what encodeChunk wrote; its first fault stops it.
type chunkReader struct {
	b   []byte
	err error
}

func (r *chunkReader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("chunk: %s runs past the end", what)
	}
	r.b = nil
}

func (r *chunkReader) int(what string) int64 {
	v, k := binary.Varint(r.b)
	if k <= 0 {
		r.fail(what)
		return 0
	}
	r.b = r.b[k:]
	return v
}

func (r *chunkReader) bytes(what string) []byte {
	n, k := binary.Uvarint(r.b)
	if k <= 0 || n > uint64(len(r.b)-k) {
		r.fail(what)
		return nil
	}
	out := r.b[k : k+int(n) : k+int(n)]
	r.b = r.b[k+int(n):]
	return out
}

// decodeChunk reads the pages of a chunk; their bodies and headers share
// its bytes.
func decodeChunk(b []byte) ([]chunkPage, error) {
	if len(b) == 0 || b[0] != chunkFormat {
		return nil, errors.New("chunk: not a chunk this node can read (format unknown)")
	}
	r := &chunkReader{b: b[1:]}
	n, k := binary.Uvarint(r.b)
	if k <= 0 || n > uint64(len(r.b))/minPageBytes {
		return nil, errors.New("chunk: bad page count")
	}
	r.b = r.b[k:]
	pages := make([]chunkPage, n)
	lens := make([]uint64, n)
	for i := range pages {
		p := &pages[i]
		p.ID = r.int("id")
		p.URL = string(r.bytes("url"))
		p.Depth = int(r.int("depth"))
		p.Final = string(r.bytes("final url"))
		p.Status = int(r.int("status"))
		p.Header = r.bytes("header")
		p.CType = string(r.bytes("content type"))
		p.At = time.UnixMicro(r.int("fetch time"))
		p.SHA256 = string(r.bytes("sha256"))
		lens[i], k = binary.Uvarint(r.b)
		if k <= 0 {
			r.fail("body length")
		} else {
			r.b = r.b[k:]
		}
	}
	if r.err != nil {
		return nil, r.err
	}
	for i := range pages {
		if lens[i] > uint64(len(r.b)) {
			return nil, fmt.Errorf("chunk: body of page %d runs past the end", pages[i].ID)
		}
		l := int(lens[i])
		pages[i].body, r.b = r.b[:l:l], r.b[l:]
	}
	return pages, readFlags(r.b, pages)
}

// readFlags reads the flags after a chunk's bodies (appendFlags) into its
// pages: none, or a byte per page.
func readFlags(b []byte, pages []chunkPage) error {
	if len(b) == 0 {
		return nil
	}
	if len(b) < len(pages) {
		return fmt.Errorf("chunk: flags of %d pages, want %d", len(b), len(pages))
	}
	for i := range pages {
		pages[i].Rendered = b[i]&flagRendered != 0
	}
	return nil
}

// chunkTokenLen is the length of a body token in a chunk: the chunk's id
// and the page's, 16 hex digits each, then the page's secret (32).
const chunkTokenLen = 16 + 16 + 32

// chunkToken is the body token of page id in chunk: its secret is the
// page's own (pageSecret), so a token opens its page and no other, and
// who holds tokens learns nothing of the chunk's secret.
func chunkToken(chunk, id int64, secret string) string {
	return tokenOf(chunk, id, pageSecret(secret, id))
}

// tokenOf lays a chunk body token out: chunk, page, secret.
func tokenOf(chunk, id int64, secret string) string {
	return fmt.Sprintf("%016x%016x%s", uint64(chunk), uint64(id), secret)
}

// pageSecret is page id's secret in a chunk whose secret is chunkSecret:
// HMAC-SHA256 keyed by the chunk's secret, over the page id, 32 hex digits.
func pageSecret(chunkSecret string, id int64) string {
	m := hmac.New(sha256.New, []byte(chunkSecret))
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(id))
	m.Write(b[:])
	return hex.EncodeToString(m.Sum(nil))[:32]
}

// legacyChunkToken is the token nodes before per-page secrets (v0.11.0)
// gave: the chunk's own secret. Still accepted, so a processor holding
// one during a rolling upgrade reads its page; it goes with v0.11.0's
// support (a node of this release never gives one out).
func legacyChunkToken(chunk, id int64, secret string) string { return tokenOf(chunk, id, secret) }

// chunkTokenPage is the chunk and page a chunk body token names.
func chunkTokenPage(token string) (chunk, id int64, ok bool) {
	if len(token) != chunkTokenLen {
		return 0, 0, false
	}
	c, err1 := strconv.ParseUint(token[:16], 16, 63)
	p, err2 := strconv.ParseUint(token[16:32], 16, 63)
	return int64(c), int64(p), err1 == nil && err2 == nil
}
