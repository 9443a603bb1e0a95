// Package archive writes what a node fetches as WARC/1.1 files (ISO
// 28500:2017), the format web archives and replay tools read, and packages
// a campaign's files as WACZ.
//
// A record holds the exchange as it crossed the wire: the request as sent
// and the response as received, status line and headers in their order and
// case, the body with its content coding (gzip stays gzip) and its transfer
// coding (chunk framing stays) as sent. Nothing is rebuilt from parsed
// headers. A response whose payload the campaign has archived before is
// written as a revisit record pointing at the first one, decided across the
// cluster by an Index in Postgres.
//
// Each campaign has its own files, in a directory named after it, each
// file opening with a warcinfo record that carries the software, its
// version and the campaign's spec. Records are gzip-compressed one by one,
// in files rotated by size. It uses github.com/nlnwa/gowarc, the National
// Library of Norway's WARC library, which also validates digests and syntax
// when reading back.
package archive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
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

// Exchange is one HTTP request and its response as they crossed the wire.
type Exchange struct {
	URL  string    // the target URI, as requested
	Date time.Time // when the request was sent
	// Request is the request as written; Response the response as read
	// (status line, headers, body with its codings), both unaltered.
	Request  []byte
	Response []byte
	// RemoteIP is the server's address (WARC-IP-Address).
	RemoteIP string
	// Truncated: Response is only the first bytes of what was sent (the
	// body cap); the record says so with WARC-Truncated: length, and is
	// never the original of a revisit.
	Truncated bool
	// NotModified, set for a 304 to a conditional request, makes the
	// record a revisit of the version the validators named (profile
	// server-not-modified, WARC 1.1 §6.7.2): the date that version was
	// fetched, as WARC-Refers-To-Date.
	NotModified *time.Time
}

// Campaign is whose exchanges are written: its files are its own.
type Campaign struct {
	Key int64  // the campaign's key in the Index
	ID  string // names the campaign's directory
	// Spec goes, as JSON, into the warcinfo record opening each file.
	Spec any
}

// Payload is an archived payload: the record that holds it.
type Payload struct {
	Digest   string // WARC-Payload-Digest
	RecordID string // WARC-Record-ID of the record holding it
	URI      string // its WARC-Target-URI
	Date     string // its WARC-Date, as written
}

// Index is the payloads a campaign has archived, shared by every node of
// the cluster, so that a payload is stored once per campaign whichever
// node meets it again.
type Index interface {
	// ClaimPayloads records each payload the campaign has not archived yet
	// and returns, for each, the record holding it: the one given when it
	// is the first, else the one archived before.
	ClaimPayloads(ctx context.Context, campaignKey int64, claims []Payload) ([]Payload, error)
	// ReleasePayloads forgets claims whose records could not be written.
	ReleasePayloads(ctx context.Context, campaignKey int64, claims []Payload) error
}

// Writer appends exchanges to one node's WARC files, one set of files per
// campaign. It is safe for concurrent use. A file is
// DIR/CAMPAIGN/spiderpool-NODE-TIMESTAMP-SERIAL.warc.gz and carries an
// .open suffix until closed: after a crash, an .open file is valid up to
// its last complete record. A campaign's file is closed after idleClose
// without a record.
type Writer struct {
	dir         string
	node        string
	maxFileSize int64
	software    string

	mu     sync.Mutex
	files  map[string]*campaignFiles // by campaign ID
	closed bool
	stop   chan struct{}
	done   chan struct{}
}

type campaignFiles struct {
	w    *gowarc.WarcFileWriter
	used time.Time
}

// idleClose is how long a campaign's file stays open without a record:
// a finished campaign's files are complete soon after, not at node stop.
const idleClose = 2 * time.Minute

// gowarcMu serialises the calls into gowarc that build records or readers.
// Each of them calls uuid.EnableRandPool, which github.com/google/uuid
// documents as unsafe to call while UUIDs are made concurrently: two
// batches archiving at once (or two nodes in one process) race on it, and
// the race detector says so. Writing builds records too: a write that opens
// a file (the first, or one past the size limit) builds its warcinfo
// record in gowarc's writer goroutine, so writes hold it as well. A WARC
// writer writes one record at a time anyway; this only orders the building
// and the writing of all campaigns together.
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
	w := &Writer{
		dir: dir, node: node, maxFileSize: maxFileSize, software: Software(),
		files: map[string]*campaignFiles{}, stop: make(chan struct{}), done: make(chan struct{}),
	}
	go w.closeIdle()
	return w, nil
}

// Software is what the warcinfo records name as their writer:
// spiderpool/VERSION, the module version this binary was built as, or the
// VCS revision it was built from.
func Software() string {
	version := "dev"
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			version = v
		} else {
			rev, dirty := "", false
			for _, s := range bi.Settings {
				switch s.Key {
				case "vcs.revision":
					rev = s.Value
				case "vcs.modified":
					dirty = s.Value == "true"
				}
			}
			if rev != "" {
				version = "dev-" + rev[:min(12, len(rev))]
				if dirty {
					version += "-dirty"
				}
			}
		}
	}
	return "spiderpool/" + version
}

// Write archives a campaign's exchanges, each as a response record (or a
// revisit record, when idx says the campaign has its payload already) and
// the request record naming it (WARC-Concurrent-To), the two in one file.
// errs has an entry per exchange: nil when written. indexErr is set when
// idx could not be asked: the exchanges are then all written in full.
func (w *Writer) Write(ctx context.Context, c Campaign, idx Index, exs []Exchange) (errs []error, indexErr error) {
	errs = make([]error, len(exs))
	pairs := make([]*pair, len(exs))
	gowarcMu.Lock()
	for i, ex := range exs {
		pairs[i], errs[i] = build(ex)
	}
	gowarcMu.Unlock()
	defer func() {
		for _, p := range pairs {
			p.close()
		}
	}()

	for i, p := range pairs {
		if p != nil && exs[i].NotModified != nil {
			ref := Payload{URI: p.uri, Date: exs[i].NotModified.UTC().Format(time.RFC3339)}
			if err := p.revisit(gowarc.ProfileServerNotModifiedV1_1, ref); err != nil {
				errs[i] = err
				p.close()
				pairs[i] = nil
			}
		}
	}
	var claims []Payload
	var claimedBy []int
	for i, p := range pairs {
		if p != nil && p.dedupable() && exs[i].NotModified == nil {
			claims = append(claims, p.payload())
			claimedBy = append(claimedBy, i)
		}
	}
	if len(claims) > 0 && idx != nil {
		held, err := idx.ClaimPayloads(ctx, c.Key, claims)
		if err == nil && len(held) != len(claims) {
			err = fmt.Errorf("payload index answered %d of %d claims", len(held), len(claims))
		}
		if err != nil {
			indexErr = fmt.Errorf("payload index of campaign %s: %w", c.ID, err)
		} else {
			for k, i := range claimedBy {
				if held[k].RecordID != claims[k].RecordID {
					if err := pairs[i].revisitOf(held[k]); err != nil {
						errs[i] = err
						pairs[i].close()
						pairs[i] = nil
					}
				} else {
					pairs[i].original, pairs[i].claim = true, claims[k]
				}
			}
		}
	}

	files, err := w.filesOf(c)
	var lost []Payload
	for i, p := range pairs {
		if p == nil {
			continue
		}
		if err != nil {
			errs[i] = err
		} else {
			gowarcMu.Lock()
			errs[i] = writePair(files, p)
			gowarcMu.Unlock()
		}
		if errs[i] != nil && p.original {
			lost = append(lost, p.claim)
		}
		p.resp, p.req = nil, nil // the writer closed them
	}
	if len(lost) > 0 && idx != nil {
		// Best effort: a claim left behind only makes a later copy of
		// the payload a revisit of a record that is not there.
		_ = idx.ReleasePayloads(context.WithoutCancel(ctx), c.Key, lost)
	}
	return errs, indexErr
}

// pair is one exchange's records, built, waiting to be written.
type pair struct {
	resp, req gowarc.WarcRecord
	id        string // the response (or revisit) record's ID
	uri, date string
	truncated bool
	empty     bool    // no payload at all
	original  bool    // claimed in the index as the payload's first record
	claim     Payload // the claim, when original
}

func (p *pair) close() {
	if p == nil {
		return
	}
	if p.resp != nil {
		p.resp.Close()
	}
	if p.req != nil {
		p.req.Close()
	}
}

// dedupable: only a whole, non-empty payload is worth pointing at.
func (p *pair) dedupable() bool { return !p.truncated && !p.empty }

func (p *pair) payload() Payload {
	return Payload{Digest: p.resp.WarcHeader().Get(gowarc.WarcPayloadDigest), RecordID: p.id, URI: p.uri, Date: p.date}
}

// revisitOf turns the response record into a revisit of the record
// holding the same payload (the identical-payload-digest profile): its
// HTTP headers are kept, its payload is not.
func (p *pair) revisitOf(orig Payload) error {
	return p.revisit(gowarc.ProfileIdenticalPayloadDigestV1_1, orig)
}

// revisit turns the response record into a revisit record of profile,
// referring to orig.
func (p *pair) revisit(profile string, orig Payload) error {
	gowarcMu.Lock()
	defer gowarcMu.Unlock()
	rv, err := p.resp.ToRevisitRecord(&gowarc.RevisitRef{
		Profile: profile, TargetRecordId: orig.RecordID, TargetUri: orig.URI, TargetDate: orig.Date,
	})
	if err != nil {
		return fmt.Errorf("revisit record for %s: %w", p.uri, err)
	}
	p.resp.Close()
	p.resp = rv
	return nil
}

// build makes an exchange's response and request records.
func build(ex Exchange) (*pair, error) {
	date := ex.Date.UTC().Truncate(time.Millisecond)
	resp, err := record(gowarc.Response, ex, date, ex.Response, "response")
	if err != nil {
		return nil, err
	}
	req, err := record(gowarc.Request, ex, date, ex.Request, "request")
	if err != nil {
		resp.Close()
		return nil, err
	}
	id := resp.WarcHeader().GetId(gowarc.WarcRecordID)
	req.WarcHeader().AddId(gowarc.WarcConcurrentTo, id)
	p := &pair{resp: resp, req: req, id: id, uri: ex.URL, date: resp.WarcHeader().Get(gowarc.WarcDate), truncated: ex.Truncated}
	if hb, ok := resp.Block().(gowarc.ProtocolHeaderBlock); ok {
		p.empty = len(hb.ProtocolHeaderBytes()) >= len(ex.Response)
	}
	return p, nil
}

func record(t gowarc.RecordType, ex Exchange, date time.Time, block []byte, msg string) (gowarc.WarcRecord, error) {
	b := gowarc.NewRecordBuilder(t, slices.Concat(recordOptions, []gowarc.WarcRecordOption{
		gowarc.WithSpecViolationPolicy(gowarc.ErrFail), gowarc.WithSyntaxErrorPolicy(gowarc.ErrFail),
		// Bytes a server sent that Go's HTTP parser finds fault with are
		// still what it sent: they are archived as they are.
		gowarc.WithBlockErrorPolicy(gowarc.ErrWarn)})...)
	b.AddWarcHeader(gowarc.WarcTargetURI, ex.URL)
	b.AddWarcHeaderTime(gowarc.WarcDate, date)
	b.AddWarcHeader(gowarc.ContentType, "application/http;msgtype="+msg)
	if ex.RemoteIP != "" {
		b.AddWarcHeader(gowarc.WarcIPAddress, ex.RemoteIP)
	}
	if t == gowarc.Response && ex.Truncated {
		b.AddWarcHeader(gowarc.WarcTruncated, "length")
	}
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
// lengths and SHA-1 digests (what WARC tools and CDX indexes expect)
// filled in.
var recordOptions = []gowarc.WarcRecordOption{
	gowarc.WithAddMissingRecordId(true), gowarc.WithAddMissingDigest(true),
	gowarc.WithAddMissingContentLength(true), gowarc.WithDefaultDigestAlgorithm("sha1"),
}

func writePair(files *gowarc.WarcFileWriter, p *pair) error {
	return writeRecords(files, p.uri, p.resp, p.req)
}

// writeRecords writes the records of uri together; the writer closes them.
func writeRecords(files *gowarc.WarcFileWriter, uri string, recs ...gowarc.WarcRecord) error {
	res := files.Write(recs...)
	if res == nil {
		return fmt.Errorf("write WARC record for %s: the writer is closed", uri)
	}
	for _, r := range res {
		if r.Err != nil {
			return fmt.Errorf("write WARC record for %s to %s: %w", uri, r.FileName, r.Err)
		}
	}
	return nil
}

// filesOf returns the campaign's file writer, opening it at first use.
func (w *Writer) filesOf(c Campaign) (*gowarc.WarcFileWriter, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, errors.New("WARC writer is closed")
	}
	if f, ok := w.files[c.ID]; ok {
		f.used = time.Now()
		return f.w, nil
	}
	info, err := w.warcinfo(c)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(w.dir, safeName(c.ID))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("WARC directory %s: %w", dir, err)
	}
	names := &fileNames{dir: dir, prefix: "spiderpool-" + safeName(w.node) + "-"}
	fw := gowarc.NewWarcFileWriter(
		gowarc.WithFileNameGenerator(names),
		gowarc.WithMaxFileSize(w.maxFileSize),
		gowarc.WithCompression(true),
		gowarc.WithRecordOptions(recordOptions...),
		gowarc.WithWarcInfoFunc(func(b gowarc.WarcRecordBuilder) error {
			_, err := b.Write(info)
			return err
		}),
	)
	w.files[c.ID] = &campaignFiles{w: fw, used: time.Now()}
	return fw, nil
}

// warcinfo is the body of the record that opens each of a campaign's
// files (application/warc-fields): who wrote it, to which standard, for
// which campaign, and the campaign's spec.
func (w *Writer) warcinfo(c Campaign) ([]byte, error) {
	fields := [][2]string{
		{"software", w.software + " (+https://github.com/spiderpool/spiderpool)"},
		{"format", "WARC File Format 1.1"},
		{"conformsTo", "https://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.1/"},
		{"hostname", hostname()},
		{"isPartOf", c.ID},
		{"description", "campaign " + c.ID + ", fetched by node " + w.node},
	}
	if c.Spec != nil {
		spec, err := json.Marshal(c.Spec)
		if err != nil {
			return nil, fmt.Errorf("warcinfo of campaign %s: %w", c.ID, err)
		}
		fields = append(fields, [2]string{"json-metadata", `{"campaign-spec":` + string(spec) + `}`})
	}
	var b strings.Builder
	for _, f := range fields {
		b.WriteString(f[0] + ": " + strings.NewReplacer("\r", " ", "\n", " ").Replace(f[1]) + "\r\n")
	}
	return []byte(b.String()), nil
}

// closeIdle closes the files of campaigns that have written nothing for
// idleClose.
func (w *Writer) closeIdle() {
	defer close(w.done)
	tick := time.NewTicker(idleClose / 4)
	defer tick.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-tick.C:
		}
		var idle []*gowarc.WarcFileWriter
		w.mu.Lock()
		for id, f := range w.files {
			if time.Since(f.used) > idleClose {
				idle = append(idle, f.w)
				delete(w.files, id)
			}
		}
		w.mu.Unlock()
		for _, fw := range idle {
			fw.Close()
		}
	}
}

// Close finishes every open file (dropping its .open suffix).
func (w *Writer) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	files := w.files
	w.files = nil
	w.mu.Unlock()
	close(w.stop)
	<-w.done
	var errs []error
	for _, f := range files {
		errs = append(errs, f.w.Close())
	}
	return errors.Join(errs...)
}

// Dir is where the files are.
func (w *Writer) Dir() string { return w.dir }

// CampaignDir is where a node writing to dir keeps the campaign's files.
func CampaignDir(dir, campaignID string) string { return filepath.Join(dir, safeName(campaignID)) }

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

// Files lists the finished and open WARC files under dir (in every
// campaign's directory), oldest first within a directory.
func Files(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && (strings.HasSuffix(path, ".warc.gz") || strings.HasSuffix(path, ".warc.gz.open")) {
			out = append(out, path)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(out)
	if len(out) == 0 {
		return nil, fmt.Errorf("%w in %s", ErrNoFiles, dir)
	}
	return out, nil
}

// ErrNoFiles is Files finding none.
var ErrNoFiles = errors.New("no WARC files")

// ReadDir reads back every record of every WARC file under dir, with
// gowarc's strict validation (syntax, lengths, digests), and calls fn with
// each record and the problems validating it found. A file that cannot be
// parsed at all is an error naming it.
func ReadDir(dir string, fn func(file string, rec gowarc.WarcRecord, problems []error) error) error {
	files, err := Files(dir)
	if err != nil {
		return err
	}
	for _, f := range files {
		if err := ReadFile(f, func(rec gowarc.Record) error { return fn(f, rec.WarcRecord, rec.Validation) }); err != nil {
			return err
		}
	}
	return nil
}

// ReadFile reads back every record of one WARC file, validated as ReadDir
// does, with its offset and size in the file.
func ReadFile(path string, fn func(gowarc.Record) error) error {
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
		err = fn(rec)
		rec.Close()
		if err != nil {
			return err
		}
	}
}
