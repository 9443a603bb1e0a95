package archive

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nlnwa/gowarc/v3"
)

// memIndex is an Index in memory, for the package's own tests (the
// Postgres one is tested in package store and end to end).
type memIndex struct {
	mu   sync.Mutex
	held map[string]Payload
	fail error
}

func (m *memIndex) ClaimPayloads(_ context.Context, _ int64, claims []Payload) ([]Payload, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return nil, m.fail
	}
	out := make([]Payload, len(claims))
	for i, c := range claims {
		if h, ok := m.held[c.Digest]; ok {
			out[i] = h
			continue
		}
		m.held[c.Digest] = c
		out[i] = c
	}
	return out, nil
}

func (m *memIndex) ReleasePayloads(context.Context, int64, []Payload) error { return nil }

// got is one record read back.
type got struct {
	file    string
	typ     gowarc.RecordType
	header  *gowarc.WarcFields
	block   []byte
	payload string
}

func readAll(t *testing.T, dir string) []got {
	t.Helper()
	var out []got
	err := ReadDir(dir, func(file string, wr gowarc.WarcRecord, problems []error) error {
		if len(problems) > 0 {
			t.Errorf("%s: %s record does not validate: %v", file, wr.Type(), problems)
		}
		g := got{file: file, typ: wr.Type(), header: wr.WarcHeader()}
		raw, err := wr.Block().RawBytes()
		if err != nil {
			return err
		}
		g.block, _ = io.ReadAll(raw)
		out = append(out, g)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func exchange(i int, body string) Exchange {
	url := fmt.Sprintf("http://127.0.0.1:8080/p/%d", i)
	return Exchange{
		URL: url, Date: time.Unix(1700000000+int64(i), 0), RemoteIP: "127.0.0.1",
		Request: []byte(fmt.Sprintf("GET /p/%d HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUser-Agent: spiderpool-test\r\nAccept-Encoding: gzip\r\n\r\n", i)),
		Response: []byte(fmt.Sprintf("HTTP/1.1 200 OK\r\ncontent-type: text/html\r\nX-Page: %d\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n",
			i, len(body), body)),
	}
}

func page(i int) string {
	return fmt.Sprintf("<html><title>page %d</title>%s</html>", i, strings.Repeat("x", 2000))
}

var testCampaign = Campaign{Key: 1, ID: "my crawl/1", Spec: map[string]any{"seeds": []string{"http://127.0.0.1:8080/"}}}

func write(t *testing.T, w *Writer, idx Index, exs ...Exchange) {
	t.Helper()
	errs, indexErr := w.Write(context.Background(), testCampaign, idx, exs)
	if indexErr != nil {
		t.Fatal(indexErr)
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

func TestRecordsHoldTheBytesExchangedAndReadBackValid(t *testing.T) {
	dir := t.TempDir()
	w, err := Open(dir, "node/1", 20_000)
	if err != nil {
		t.Fatal(err)
	}
	idx := &memIndex{held: map[string]Payload{}}
	var sent []Exchange
	for i := range 30 {
		ex := exchange(i, page(i))
		sent = append(sent, ex)
		write(t, w, idx, ex)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	recs := readAll(t, dir)
	files := map[string]bool{}
	responses := map[string]got{}
	var requests []got
	infos := 0
	for _, r := range recs {
		files[r.file] = true
		if filepath.Dir(r.file) != CampaignDir(dir, testCampaign.ID) {
			t.Errorf("%s is not in the campaign's directory %s", r.file, CampaignDir(dir, testCampaign.ID))
		}
		switch r.typ {
		case gowarc.Warcinfo:
			infos++
			for _, want := range []string{"software: spiderpool/", "isPartOf: my crawl/1", `json-metadata: {"campaign-spec":{"seeds":["http://127.0.0.1:8080/"]}}`} {
				if !bytes.Contains(r.block, []byte(want)) {
					t.Errorf("warcinfo %q lacks %q", r.block, want)
				}
			}
		case gowarc.Response:
			responses[r.header.Get(gowarc.WarcTargetURI)] = r
		case gowarc.Request:
			requests = append(requests, r)
		}
	}
	if len(files) < 2 || infos != len(files) {
		t.Errorf("%d files, %d warcinfo records: want rotation at 20 KB and one warcinfo a file", len(files), infos)
	}
	for _, ex := range sent {
		r, ok := responses[ex.URL]
		if !ok {
			t.Errorf("%s: no response record", ex.URL)
			continue
		}
		if !bytes.Equal(r.block, ex.Response) {
			t.Errorf("%s: block\n%q\nwant the bytes received\n%q", ex.URL, r.block, ex.Response)
		}
		if r.header.Get(gowarc.WarcIPAddress) != "127.0.0.1" || r.header.Get(gowarc.WarcDate) != ex.Date.UTC().Format(time.RFC3339) {
			t.Errorf("%s: IP %q date %q", ex.URL, r.header.Get(gowarc.WarcIPAddress), r.header.Get(gowarc.WarcDate))
		}
	}
	if len(requests) != len(sent) {
		t.Fatalf("%d request records for %d exchanges", len(requests), len(sent))
	}
	for _, req := range requests {
		resp := responses[req.header.Get(gowarc.WarcTargetURI)]
		if req.header.GetId(gowarc.WarcConcurrentTo) != resp.header.GetId(gowarc.WarcRecordID) || resp.file != req.file {
			t.Errorf("request for %s names %q, its response is %q (files %s, %s)", req.header.Get(gowarc.WarcTargetURI),
				req.header.GetId(gowarc.WarcConcurrentTo), resp.header.GetId(gowarc.WarcRecordID), req.file, resp.file)
		}
	}
}

func TestAPayloadArchivedBeforeIsARevisit(t *testing.T) {
	dir := t.TempDir()
	w, err := Open(dir, "n1", 0)
	if err != nil {
		t.Fatal(err)
	}
	idx := &memIndex{held: map[string]Payload{}}
	same := page(0)
	// The second in the same call as the first, the third later: both
	// are revisits of the first.
	write(t, w, idx, exchange(1, same), exchange(2, same))
	write(t, w, idx, exchange(3, same), exchange(4, page(4)))
	w.Close()
	var orig got
	revisits := map[string]got{}
	responses := 0
	for _, r := range readAll(t, dir) {
		switch r.typ {
		case gowarc.Response:
			responses++
			if r.header.Get(gowarc.WarcTargetURI) == exchange(1, "").URL {
				orig = r
			}
		case gowarc.Revisit:
			revisits[r.header.Get(gowarc.WarcTargetURI)] = r
		}
	}
	if responses != 2 || len(revisits) != 2 || orig.header == nil {
		t.Fatalf("%d responses, %d revisits (%v); want the first and page 4 in full, 2 and 3 revisits of 1", responses, len(revisits), revisits)
	}
	for _, i := range []int{2, 3} {
		rv := revisits[exchange(i, "").URL]
		h := rv.header
		if h.Get(gowarc.WarcProfile) != gowarc.ProfileIdenticalPayloadDigestV1_1 ||
			h.GetId(gowarc.WarcRefersTo) != orig.header.GetId(gowarc.WarcRecordID) ||
			h.Get(gowarc.WarcRefersToTargetURI) != exchange(1, "").URL ||
			h.Get(gowarc.WarcRefersToDate) != orig.header.Get(gowarc.WarcDate) ||
			h.Get(gowarc.WarcPayloadDigest) != orig.header.Get(gowarc.WarcPayloadDigest) {
			t.Errorf("revisit %d: %v; want it to name record %s of %s at %s", i, h, orig.header.GetId(gowarc.WarcRecordID),
				exchange(1, "").URL, orig.header.Get(gowarc.WarcDate))
		}
		ex := exchange(i, same)
		if head := ex.Response[:bytes.Index(ex.Response, []byte("\r\n\r\n"))+4]; !bytes.Equal(rv.block, head) {
			t.Errorf("revisit %d block %q, want the response's header block %q", i, rv.block, head)
		}
	}
}

func TestATruncatedResponseSaysSoAndIsNoOriginal(t *testing.T) {
	dir := t.TempDir()
	w, err := Open(dir, "n1", 0)
	if err != nil {
		t.Fatal(err)
	}
	idx := &memIndex{held: map[string]Payload{}}
	cut := exchange(1, page(1))
	cut.Response, cut.Truncated = cut.Response[:200], true
	cut2 := exchange(2, page(1))
	cut2.Response, cut2.Truncated = cut2.Response[:200], true
	write(t, w, idx, cut, cut2)
	w.Close()
	n := 0
	for _, r := range readAll(t, dir) {
		if r.typ == gowarc.Revisit {
			t.Errorf("%s: a truncated payload was deduplicated", r.header.Get(gowarc.WarcTargetURI))
		}
		if r.typ == gowarc.Response {
			n++
			if r.header.Get(gowarc.WarcTruncated) != "length" || len(r.block) != 200 {
				t.Errorf("%s: WARC-Truncated %q, %d bytes; want length, the 200 bytes kept", r.header.Get(gowarc.WarcTargetURI), r.header.Get(gowarc.WarcTruncated), len(r.block))
			}
		}
	}
	if n != 2 {
		t.Errorf("%d response records, want 2", n)
	}
}

func TestAnIndexThatCannotAnswerLeavesEveryPayloadInFull(t *testing.T) {
	dir := t.TempDir()
	w, err := Open(dir, "n1", 0)
	if err != nil {
		t.Fatal(err)
	}
	idx := &memIndex{held: map[string]Payload{}, fail: errors.New("postgres is away")}
	errs, indexErr := w.Write(context.Background(), testCampaign, idx, []Exchange{exchange(1, page(0)), exchange(2, page(0))})
	if indexErr == nil || errors.Join(errs...) != nil {
		t.Fatalf("index error %v, write errors %v; want the index's error reported and both written", indexErr, errs)
	}
	w.Close()
	n := 0
	for _, r := range readAll(t, dir) {
		if r.typ == gowarc.Response {
			n++
		}
	}
	if n != 2 {
		t.Errorf("%d response records, want both in full", n)
	}
}

func TestOpenNamesAnUnwritableDirectory(t *testing.T) {
	_, err := Open("/proc/spiderpool-warc", "n1", 0)
	if err == nil || !strings.Contains(err.Error(), "/proc/spiderpool-warc") {
		t.Fatalf("err = %v, want one naming the directory", err)
	}
}

// TestANotModifiedAnswerIsARevisit: a 304 to a conditional request is
// archived as a revisit of profile server-not-modified, naming the URL and
// the date of the version it stands for, and never claims a payload.
func TestANotModifiedAnswerIsARevisit(t *testing.T) {
	dir := t.TempDir()
	w, err := Open(dir, "n1", 0)
	if err != nil {
		t.Fatal(err)
	}
	idx := &memIndex{held: map[string]Payload{}}
	was := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	ex := exchange(1, "")
	ex.Response = []byte("HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\n\r\n")
	ex.NotModified = &was
	write(t, w, idx, ex)
	w.Close()
	var revisits, responses int
	for _, r := range readAll(t, dir) {
		switch r.typ {
		case gowarc.Response:
			responses++
		case gowarc.Revisit:
			revisits++
			h := r.header
			if h.Get(gowarc.WarcProfile) != gowarc.ProfileServerNotModifiedV1_1 ||
				h.Get(gowarc.WarcRefersToTargetURI) != ex.URL || h.Get(gowarc.WarcRefersToDate) != "2026-12-01T10:00:00Z" {
				t.Errorf("revisit: %v; want server-not-modified of %s at 2026-12-01T10:00:00Z", h, ex.URL)
			}
		}
	}
	if responses != 0 || revisits != 1 || len(idx.held) != 0 {
		t.Errorf("%d responses, %d revisits, %d payloads claimed; want one revisit and no claim", responses, revisits, len(idx.held))
	}
}

// TestWritesOfTwoCampaignsAtOnce: two campaigns archive at once, each
// opening new files as it goes (a small size limit), so that gowarc builds
// warcinfo records in its writer goroutines while records are built for
// the other campaign. Under the race detector, that must not race.
func TestWritesOfTwoCampaignsAtOnce(t *testing.T) {
	w, err := Open(t.TempDir(), "n1", 1<<10)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var wg sync.WaitGroup
	for c := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			camp := Campaign{Key: int64(c + 1), ID: fmt.Sprintf("c%d", c), Spec: map[string]any{}}
			for i := range 20 {
				errs, _ := w.Write(context.Background(), camp, nil, []Exchange{exchange(100*c+i, page(i))})
				if errs[0] != nil {
					t.Error(errs[0])
					return
				}
			}
		}()
	}
	wg.Wait()
}
