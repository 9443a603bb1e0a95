// Package archive writes what a node fetches as WARC/1.1 files (ISO
// 28500:2017), the format web archives and replay tools read: for every
// page, a request record and a response record holding the HTTP exchange,
// each gzip-compressed on its own, in files rotated by size. It uses
// github.com/nlnwa/gowarc, the National Library of Norway's WARC library,
// which also validates digests and syntax when reading back.
package archive

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nlnwa/gowarc/v3"
)

// DefaultMaxFileSize is the size a WARC file rotates at: 1 GiB, the
// customary size of web archives' files.
const DefaultMaxFileSize = 1 << 30

// Exchange is one HTTP request and its response as the crawler saw them.
type Exchange struct {
	URL  string
	Date time.Time // when the request was sent
	// Request is the request as sent.
	Method        string
	RequestHeader http.Header
	// Response: status line parts, headers as received, body as read
	// (after transfer decoding and decompression; Content-Encoding and
	// Content-Length are rewritten to match it).
	Proto        string
	Status       int
	Header       http.Header
	Body         []byte
	Decompressed bool
}

// Writer appends exchanges to one node's WARC files. It is safe for
// concurrent use. A file is named spiderpool-NODE-TIMESTAMP-SERIAL.warc.gz
// and carries an .open suffix until closed: after a crash, an .open file
// is valid up to its last complete record.
type Writer struct {
	w   *gowarc.WarcFileWriter
	dir string
}

// gowarcMu serialises the calls into gowarc that build records or readers.
// Each of them calls uuid.EnableRandPool, which github.com/google/uuid
// documents as unsafe to call while UUIDs are made concurrently: two
// batches archiving at once (or two nodes in one process) race on it, and
// the race detector says so. A WARC writer writes one record at a time
// anyway; this only orders the building too.
var gowarcMu sync.Mutex

// Open makes dir if need be and returns a writer for node's files there.
func Open(dir, node string, maxFileSize int64) (*Writer, error) {
	if maxFileSize <= 0 {
		maxFileSize = DefaultMaxFileSize
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("WARC directory %s: %w", dir, err)
	}
	probe, err := os.CreateTemp(dir, ".spiderpool-probe-*")
	if err != nil {
		return nil, fmt.Errorf("WARC directory %s is not writable: %w", dir, err)
	}
	probe.Close()
	os.Remove(probe.Name())
	names := &fileNames{dir: dir, prefix: "spiderpool-" + safeName(node) + "-"}
	w := gowarc.NewWarcFileWriter(
		gowarc.WithFileNameGenerator(names),
		gowarc.WithMaxFileSize(maxFileSize),
		gowarc.WithCompression(true),
		gowarc.WithRecordOptions(recordOptions...),
		gowarc.WithWarcInfoFunc(func(b gowarc.WarcRecordBuilder) error {
			_, err := fmt.Fprintf(b, "software: spiderpool\r\nformat: WARC File Format 1.1\r\n"+
				"conformsTo: http://iso25577.org/WARC/1.1\r\nhostname: %s\r\ndescription: pages fetched by node %s\r\n",
				hostname(), node)
			return err
		}),
	)
	return &Writer{w: w, dir: dir}, nil
}

// Write appends ex as a response record and its request record, in that
// order and in one file, each naming the other (WARC-Concurrent-To).
func (w *Writer) Write(ex Exchange) error {
	respBlock, reqBlock := responseBlock(ex), requestBlock(ex)
	gowarcMu.Lock()
	defer gowarcMu.Unlock()
	resp, err := w.record(gowarc.Response, ex, respBlock)
	if err != nil {
		return err
	}
	req, err := w.record(gowarc.Request, ex, reqBlock)
	if err != nil {
		resp.Close()
		return err
	}
	req.WarcHeader().AddId(gowarc.WarcConcurrentTo, resp.WarcHeader().GetId(gowarc.WarcRecordID))
	for _, r := range w.w.Write(resp, req) {
		if r.Err != nil {
			return fmt.Errorf("write WARC record for %s to %s: %w", ex.URL, r.FileName, r.Err)
		}
	}
	return nil
}

func (w *Writer) record(t gowarc.RecordType, ex Exchange, block []byte) (gowarc.WarcRecord, error) {
	msg := "response"
	if t == gowarc.Request {
		msg = "request"
	}
	b := gowarc.NewRecordBuilder(t, slices.Concat(recordOptions, []gowarc.WarcRecordOption{
		gowarc.WithSpecViolationPolicy(gowarc.ErrFail), gowarc.WithSyntaxErrorPolicy(gowarc.ErrFail)})...)
	b.AddWarcHeader(gowarc.WarcTargetURI, ex.URL)
	b.AddWarcHeaderTime(gowarc.WarcDate, ex.Date)
	b.AddWarcHeader(gowarc.ContentType, "application/http;msgtype="+msg)
	if _, err := b.Write(block); err != nil {
		return nil, fmt.Errorf("WARC %s record for %s: %w", msg, ex.URL, err)
	}
	rec, _, err := b.Build()
	if err != nil {
		return nil, fmt.Errorf("WARC %s record for %s: %w", msg, ex.URL, err)
	}
	return rec, nil
}

// recordOptions build every record, ours and the writer's warcinfo: IDs,
// lengths and SHA-1 digests (what WARC tools expect) filled in.
var recordOptions = []gowarc.WarcRecordOption{
	gowarc.WithAddMissingRecordId(true), gowarc.WithAddMissingDigest(true),
	gowarc.WithAddMissingContentLength(true), gowarc.WithDefaultDigestAlgorithm("sha1"),
}

// Close finishes the current file (dropping its .open suffix).
func (w *Writer) Close() error { return w.w.Close() }

// Dir is where the files are.
func (w *Writer) Dir() string { return w.dir }

func responseBlock(ex Exchange) []byte {
	var b bytes.Buffer
	proto := ex.Proto
	if proto == "" || strings.HasPrefix(proto, "HTTP/2") {
		proto = "HTTP/1.1" // WARC's application/http is HTTP/1.x framing
	}
	fmt.Fprintf(&b, "%s %d %s\r\n", proto, ex.Status, http.StatusText(ex.Status))
	h := ex.Header.Clone()
	if h == nil {
		h = http.Header{}
	}
	// The body stored is the one read: whole, decoded; say so.
	h.Del("Transfer-Encoding")
	if ex.Decompressed {
		h.Del("Content-Encoding")
	}
	h.Set("Content-Length", fmt.Sprint(len(ex.Body)))
	writeHeader(&b, h)
	b.Write(ex.Body)
	return b.Bytes()
}

func requestBlock(ex Exchange) []byte {
	var b bytes.Buffer
	method := ex.Method
	if method == "" {
		method = http.MethodGet
	}
	target, host := ex.URL, ""
	if u, err := url.Parse(ex.URL); err == nil { // canonical URLs always parse
		target, host = u.RequestURI(), u.Host
	}
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\n", method, target, host)
	writeHeader(&b, ex.RequestHeader)
	return b.Bytes()
}

func writeHeader(b *bytes.Buffer, h http.Header) {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, v := range h[k] {
			fmt.Fprintf(b, "%s: %s\r\n", k, strings.NewReplacer("\r", " ", "\n", " ").Replace(v))
		}
	}
	b.WriteString("\r\n")
}

// fileNames names files spiderpool-NODE-YYYYMMDDhhmmss-SERIAL.warc.
type fileNames struct {
	dir    string
	prefix string
	serial atomic.Int32
}

func (f *fileNames) NewWarcfileName() (string, string) {
	return f.dir, fmt.Sprintf("%s%s-%05d.warc", f.prefix, time.Now().UTC().Format("20060102150405"), f.serial.Add(1))
}

func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '-' || r == '_' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			return r
		}
		return '_'
	}, s)
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "unknown"
	}
	return h
}

// Files lists the finished and open WARC files in dir, oldest first.
func Files(dir string) ([]string, error) {
	var out []string
	for _, pat := range []string{"*.warc.gz", "*.warc.gz.open"} {
		m, err := filepath.Glob(filepath.Join(dir, pat))
		if err != nil {
			return nil, err
		}
		out = append(out, m...)
	}
	sort.Strings(out)
	if len(out) == 0 {
		return nil, errors.New("no WARC files in " + dir)
	}
	return out, nil
}

// ReadDir reads back every record of every WARC file in dir, oldest file
// first, with gowarc's strict validation (syntax, lengths, digests), and
// calls fn with each record and the problems validating it found. A file
// that cannot be parsed at all is an error naming it.
func ReadDir(dir string, fn func(file string, rec gowarc.WarcRecord, problems []error) error) error {
	files, err := Files(dir)
	if err != nil {
		return err
	}
	for _, f := range files {
		if err := readFile(f, fn); err != nil {
			return err
		}
	}
	return nil
}

func readFile(path string, fn func(string, gowarc.WarcRecord, []error) error) error {
	gowarcMu.Lock()
	r, err := gowarc.NewWarcFileReader(path, 0, gowarc.WithStrictValidation())
	gowarcMu.Unlock()
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	defer r.Close()
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
		err = fn(path, rec.WarcRecord, rec.Validation)
		rec.Close()
		if err != nil {
			return err
		}
	}
}
