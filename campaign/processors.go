package campaign

import (
	"encoding/json"
	"fmt"
	"mime"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Processor is user code that every matching page of a campaign flows to:
// a Temporal activity, in any SDK language, on the user's own task queue.
// It takes a ProcessRequest (a batch of pages) and returns a
// ProcessResult (items and links per page). See docs/processors.md.
type Processor struct {
	// Name is how status, export and the items table name it: lower case
	// letters, digits, '-' and '_'.
	Name string `json:"name"`
	// TaskQueue is where the processor's workers poll.
	TaskQueue string `json:"task_queue"`
	// Activity is the activity type the workers register.
	Activity string `json:"activity"`
	// ContentTypes are the media types it wants: "text/html" (the
	// default), "image/*", or "*/*" for all. Parameters are ignored.
	ContentTypes []string `json:"content_types,omitempty"`
	// Statuses are the HTTP statuses it wants, as classes ("2xx", the
	// default; "3xx") or single codes ("200").
	Statuses []string `json:"statuses,omitempty"`
	// Include, when set, admits only pages whose URL matches one of these
	// regular expressions; Exclude drops any that matches one.
	Include []string `json:"include,omitempty"`
	Exclude []string `json:"exclude,omitempty"`
	// BatchSize is the most pages in one activity. Default 20.
	BatchSize int `json:"batch_size"`
	// Window is how many batches may be in flight at once. Default 4.
	Window int `json:"window"`
	// MaxPending bounds the pages waiting for this processor (beside those
	// in its window of batches): past it the
	// campaign stops leasing URLs to fetch until the processor catches
	// up, so a slow or stopped processor slows the crawl down instead of
	// piling pages up. Default 2000.
	MaxPending int `json:"max_pending"`
	// Bodies is how bodies travel: "inline" (the default) sends each body
	// up to InlineBodyLimit inside the request, so Temporal carries it;
	// "reference" sends every body by reference (Page.BodyRef), to be got
	// from the nodes, all of a batch in one request (BodyServers), so
	// Temporal carries only the pages' metadata. "reference" needs nodes
	// that serve bodies (--bodies-addr); without any, bodies go inline.
	// Left empty it is "inline", and stays empty in the normalised spec:
	// a campaign started before this field existed sends its activities
	// the same spec on replay.
	Bodies string `json:"bodies,omitempty"`
	// Batch is how a batch's pages travel: "inline" (the default) puts
	// them in the request, so Temporal carries every page's metadata
	// twice (the lease's result and the processor's input); "reference"
	// sends only a reference to the batch (ProcessRequest.Batch), a few
	// hundred bytes whatever its size, and the processor gets the pages
	// from a node, and their bodies as with bodies "reference". The Go
	// package (processor) takes either. It needs nodes that serve bodies;
	// without any, pages go inline. Empty means "inline", and stays empty
	// in the normalised spec (see Bodies).
	Batch string `json:"batch,omitempty"`
	// Unchanged is what the processor makes, in a recurring campaign
	// (Spec.Recrawl), of a page that did not change since the run that
	// last fetched it: one that answered 304 to its validators, or was
	// not due for a revisit and so not asked at all. "skip" (the
	// default) sends it nothing, so a run's items cover only the pages
	// that changed. "last_version" carries into this run, without a
	// call, the items the processor made of the page's last version (in
	// the run that fetched it), marked carried_from that run: each run's
	// items are then complete. A page gone (404, 410) has no version and
	// carries nothing. Empty means "skip", and stays empty in the
	// normalised spec (see Bodies).
	Unchanged string `json:"unchanged,omitempty"`
	// Document is which body the processor gets of a page a browser
	// rendered (Spec.Render): "rendered" (the default), the DOM as the
	// page's scripts left it; "original", the document as the server
	// sent it (of a script-built app, its empty shell). A page that was
	// not rendered has one body, which the processor gets either way.
	// Empty means "rendered", and stays empty in the normalised spec (see
	// Bodies).
	Document string `json:"document,omitempty"`
	// InlineBodyLimit is the largest body sent inside the request; a
	// larger one is sent by reference (Page.BodyRef). Default 256 KiB,
	// at most 512 KiB, the most a batch carries inline.
	InlineBodyLimit int64 `json:"inline_body_limit"`
	// Timeout bounds one attempt of a batch (StartToClose). Default 1m.
	Timeout Duration `json:"timeout"`
	// Retry is the activity's retry policy. When its attempts run out the
	// batch's pages end failed for this processor, with the last error.
	Retry ProcessorRetry `json:"retry"`
}

// ProcessorRetry is a processor activity's Temporal retry policy.
type ProcessorRetry struct {
	// MaxAttempts counts the first attempt. Default 5.
	MaxAttempts int `json:"max_attempts"`
	// InitialInterval is the wait before the second attempt. Default 1s.
	InitialInterval Duration `json:"initial_interval"`
	// BackoffCoefficient multiplies the wait after each attempt. Default 2.
	BackoffCoefficient float64 `json:"backoff_coefficient"`
	// MaxInterval caps the wait. Default 30s.
	MaxInterval Duration `json:"max_interval"`
}

// Processor limits.
const (
	DefaultProcessorBatch      = 20
	DefaultProcessorWindow     = 4
	DefaultProcessorMaxPending = 2000
	DefaultInlineBodyLimit     = 256 << 10
	MaxInlineBodyLimit         = 512 << 10
	// MaxInlineBatchBytes caps the bodies inline in one batch. A batch's
	// bodies are in its ProcessBatch child's history twice (the lease's
	// result, the processor's input), each a payload that the SDK warns
	// about past 512 KiB.
	MaxInlineBatchBytes = 512 << 10
)

// MaxBodiesPerRequest bounds the tokens of one request to BodyServers.
const MaxBodiesPerRequest = 1000

// AppendedBatchType is the content type of a batch served with
// ?bodies=appended (see BatchRef): the request as one line of JSON, then
// the bodies of its pages that have no body_ref, in page order, each
// body_length bytes. Base64 in JSON cost a processor more CPU to read than
// anything else it did with a batch (a no-op processor spent 63% of its
// time decoding them).
const AppendedBatchType = "application/x-spiderpool-batch"

// How a processor's bodies travel (Processor.Bodies), and its batches
// (Processor.Batch).
const (
	BodiesInline    = "inline"
	BodiesReference = "reference"
	BatchInline     = "inline"
	BatchReference  = "reference"
)

// Which body a processor gets of a rendered page (Processor.Document).
const (
	DocumentRendered = "rendered"
	DocumentOriginal = "original"
)

// What a processor makes of an unchanged page (Processor.Unchanged).
const (
	UnchangedSkip        = "skip"
	UnchangedLastVersion = "last_version"
)

var processorName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// normalizeProcessors fills each processor's defaults and reports every
// problem, naming its field.
func (s *Spec) normalizeProcessors(add func(error)) {
	names := map[string]bool{}
	for i := range s.Processors {
		p := &s.Processors[i]
		field := func(name string) string { return fmt.Sprintf("spec.processors[%d].%s", i, name) }
		switch {
		case !processorName.MatchString(p.Name):
			add(fieldErr(field("name"), "want lower-case letters, digits, '-' or '_' (1-63, starting with a letter or digit), got %q", p.Name))
		case names[p.Name]:
			add(fieldErr(field("name"), "processor %q is named twice", p.Name))
		}
		names[p.Name] = true
		if strings.TrimSpace(p.TaskQueue) == "" {
			add(fieldErr(field("task_queue"), "the task queue the processor's workers poll is required"))
		}
		if strings.TrimSpace(p.Activity) == "" {
			add(fieldErr(field("activity"), "the activity type the processor's workers register is required"))
		}
		p.normalizeFilter(field, add)
		p.normalizeDelivery(field, add)
		p.normalizeAttempts(field, add)
	}
}

// normalizeFilter checks which pages the processor wants (see PageFilter),
// lower-casing its content types and defaulting them to text/html and its
// statuses to 2xx.
func (p *Processor) normalizeFilter(field func(string) string, add func(error)) {
	if len(p.ContentTypes) == 0 {
		p.ContentTypes = []string{"text/html"}
	}
	for j, ct := range p.ContentTypes {
		if _, _, ok := strings.Cut(ct, "/"); !ok && ct != "*" {
			add(fieldErr(field(fmt.Sprintf("content_types[%d]", j)), "want a media type such as \"text/html\", \"image/*\" or \"*/*\", got %q", ct))
		}
		p.ContentTypes[j] = strings.ToLower(strings.TrimSpace(ct))
	}
	if len(p.Statuses) == 0 {
		p.Statuses = []string{"2xx"}
	}
	for j, st := range p.Statuses {
		if _, _, ok := statusRange(st); !ok {
			add(fieldErr(field(fmt.Sprintf("statuses[%d]", j)), "want a class such as \"2xx\" or a status such as \"200\", got %q", st))
		}
	}
	checkPatterns(add, field("include"), p.Include)
	checkPatterns(add, field("exclude"), p.Exclude)
}

// normalizeDelivery checks how pages travel to the processor: its batches,
// its window and backlog, how bodies, batches and unchanged pages are sent.
// Bodies, Batch, Unchanged and Document stay empty when empty (see Bodies).
func (p *Processor) normalizeDelivery(field func(string) string, add func(error)) {
	defaultIntIn(add, field("batch_size"), &p.BatchSize, DefaultProcessorBatch, 1, 1000)
	defaultIntIn(add, field("window"), &p.Window, DefaultProcessorWindow, 1, 64)
	defaultIntIn(add, field("max_pending"), &p.MaxPending, DefaultProcessorMaxPending, 1, 1_000_000)
	switch p.Bodies {
	case "", BodiesInline, BodiesReference:
	default:
		add(fieldErr(field("bodies"), "want %q or %q, got %q", BodiesInline, BodiesReference, p.Bodies))
	}
	switch p.Batch {
	case "", BatchInline, BatchReference:
	default:
		add(fieldErr(field("batch"), "want %q or %q, got %q", BatchInline, BatchReference, p.Batch))
	}
	switch p.Unchanged {
	case "", UnchangedSkip, UnchangedLastVersion:
	default:
		add(fieldErr(field("unchanged"), "want %q or %q, got %q", UnchangedSkip, UnchangedLastVersion, p.Unchanged))
	}
	switch p.Document {
	case "", DocumentRendered, DocumentOriginal:
	default:
		add(fieldErr(field("document"), "want %q or %q, got %q", DocumentRendered, DocumentOriginal, p.Document))
	}
	if p.InlineBodyLimit == 0 {
		p.InlineBodyLimit = DefaultInlineBodyLimit
	}
	if p.InlineBodyLimit < 0 || p.InlineBodyLimit > MaxInlineBodyLimit {
		add(fieldErr(field("inline_body_limit"), "must be 0..%d bytes, got %d", MaxInlineBodyLimit, p.InlineBodyLimit))
	}
}

// normalizeAttempts checks how long one attempt of a batch may take and how
// it is retried.
func (p *Processor) normalizeAttempts(field func(string) string, add func(error)) {
	defaultDuration(&p.Timeout, time.Minute)
	durationIn(add, field("timeout"), p.Timeout, time.Second, 24*time.Hour)
	r := &p.Retry
	defaultIntIn(add, field("retry.max_attempts"), &r.MaxAttempts, 5, 1, 100)
	defaultDuration(&r.InitialInterval, time.Second)
	defaultDuration(&r.MaxInterval, 30*time.Second)
	if r.BackoffCoefficient == 0 {
		r.BackoffCoefficient = 2
	}
	if r.BackoffCoefficient < 1 || r.BackoffCoefficient > 100 {
		add(fieldErr(field("retry.backoff_coefficient"), "must be 1..100, got %v", r.BackoffCoefficient))
	}
	durationIn(add, field("retry.initial_interval"), r.InitialInterval, time.Millisecond, 24*time.Hour)
	durationIn(add, field("retry.max_interval"), r.MaxInterval, r.InitialInterval.D(), 24*time.Hour)
}

// defaultIntIn sets *v to def when it is 0, then reports it outside lo..hi.
func defaultIntIn(add func(error), field string, v *int, def, lo, hi int) {
	if *v == 0 {
		*v = def
	}
	if *v < lo || *v > hi {
		add(fieldErr(field, "must be %d..%d, got %d", lo, hi, *v))
	}
}

// statusRange reads "2xx" or "200" as the statuses it covers.
func statusRange(s string) (lo, hi int, ok bool) {
	s = strings.ToLower(strings.TrimSpace(s))
	if len(s) == 3 && strings.HasSuffix(s, "xx") && s[0] >= '1' && s[0] <= '5' {
		lo = int(s[0]-'0') * 100
		return lo, lo + 99, true
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 100 || n > 599 {
		return 0, 0, false
	}
	return n, n, true
}

// PageFilter is a processor's page filter, compiled.
type PageFilter struct {
	Name     string
	types    []string
	statuses [][2]int
	include  []*regexp.Regexp
	exclude  []*regexp.Regexp
	// lastVersion: unchanged pages keep the items of their last version
	// (Processor.Unchanged).
	lastVersion bool
	// original: of a rendered page, the processor gets the document as
	// served (Processor.Document).
	original bool
}

// CompileFilters builds the page filters of a normalised spec's
// processors, in spec order.
func (s Spec) CompileFilters() ([]PageFilter, error) {
	var out []PageFilter
	for _, p := range s.Processors {
		f := PageFilter{Name: p.Name, types: p.ContentTypes, lastVersion: p.Unchanged == UnchangedLastVersion,
			original: p.Document == DocumentOriginal}
		for _, st := range p.Statuses {
			lo, hi, ok := statusRange(st)
			if !ok {
				return nil, fmt.Errorf("processor %s: status %q", p.Name, st)
			}
			f.statuses = append(f.statuses, [2]int{lo, hi})
		}
		for _, list := range []struct {
			pats []string
			to   *[]*regexp.Regexp
		}{{p.Include, &f.include}, {p.Exclude, &f.exclude}} {
			for _, pat := range list.pats {
				re, err := regexp.Compile(pat)
				if err != nil {
					return nil, fmt.Errorf("processor %s: %w", p.Name, err)
				}
				*list.to = append(*list.to, re)
			}
		}
		out = append(out, f)
	}
	return out, nil
}

// Wants says whether a page goes to the processor.
func (f *PageFilter) Wants(url string, status int, contentType string) bool {
	statusOK := false
	for _, r := range f.statuses {
		statusOK = statusOK || (status >= r[0] && status <= r[1])
	}
	if !statusOK || !typeMatches(f.types, contentType) {
		return false
	}
	return f.wantsURL(url)
}

// KeepsLastVersion says whether a page of this URL that did not change
// (or was not due) keeps the items of its last version for the processor.
// Its status and type were judged when that version was fetched: a page
// the processor did not want then has no items to keep.
func (f *PageFilter) KeepsLastVersion(url string) bool {
	return f.lastVersion && f.wantsURL(url)
}

// WantsOriginal says whether the processor gets, of a page a browser
// rendered, the document as served rather than the rendered DOM.
func (f *PageFilter) WantsOriginal() bool { return f.original }

func (f *PageFilter) wantsURL(url string) bool {
	if len(f.include) > 0 && !anyMatch(f.include, url) {
		return false
	}
	return !anyMatch(f.exclude, url)
}

func typeMatches(want []string, contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		mt = strings.ToLower(strings.TrimSpace(strings.Split(contentType, ";")[0]))
	}
	major, _, _ := strings.Cut(mt, "/")
	for _, w := range want {
		switch {
		case w == "*" || w == "*/*" || w == mt:
			return true
		case strings.HasSuffix(w, "/*") && strings.TrimSuffix(w, "/*") == major:
			return true
		}
	}
	return false
}

func anyMatch(res []*regexp.Regexp, s string) bool {
	for _, re := range res {
		if re.MatchString(s) {
			return true
		}
	}
	return false
}

// WantsAnyType says whether some processor takes pages that are not HTML,
// so that a node keeps their bodies.
func (s Spec) WantsAnyType() bool {
	for _, p := range s.Processors {
		for _, ct := range p.ContentTypes {
			if ct != "text/html" && ct != "application/xhtml+xml" {
				return true
			}
		}
	}
	return false
}

// ProcessRequest is the input of a processor activity: one batch of pages
// of one campaign.
type ProcessRequest struct {
	// Campaign is the campaign ID (its workflow ID).
	Campaign string `json:"campaign"`
	// Processor is the processor's name in the spec.
	Processor string        `json:"processor"`
	Pages     []ProcessPage `json:"pages"`
	// BodyServers are the nodes' body endpoints: POST one of them a JSON
	// array of tokens (BodyRef.Token) and it answers with those bodies, in
	// that order, each as a line "<token> <length>\n" and then length bytes
	// (length -1, and no bytes, for a body it does not have). A client may
	// as well GET each BodyRef's URLs.
	BodyServers []string `json:"body_servers,omitempty"`
	// Batch, set when the processor takes its batches by reference
	// (Processor.Batch), names the batch instead of Pages: GET one of its
	// URLs and the answer is this request with Pages and BodyServers
	// filled in, each body by reference. ?bodies=inline puts the bodies
	// that fit inside their pages, and ?bodies=appended after the JSON
	// (AppendedBatchType).
	Batch *BatchRef `json:"batch,omitempty"`
}

// BatchRef names a batch of pages that a node serves (see
// ProcessRequest.Batch).
type BatchRef struct {
	// URLs are the batch at each node that serves batches; any one will do.
	URLs []string `json:"urls"`
	// Token names the batch; Pages counts its pages.
	Token string `json:"token"`
	Pages int    `json:"pages"`
}

// ProcessPage is one fetched page as a processor gets it.
type ProcessPage struct {
	// Key is the page's idempotency key, unique within the campaign and
	// processor ("<campaign>/<url id>"): a retried batch carries the same
	// keys, and items are stored once per key.
	Key string `json:"key"`
	// URL is the URL as requested; FinalURL the one that answered (they
	// differ only when the page was reached by a redirect).
	URL         string              `json:"url"`
	FinalURL    string              `json:"final_url"`
	Depth       int                 `json:"depth"`
	Status      int                 `json:"status"`
	Headers     map[string][]string `json:"headers"`
	ContentType string              `json:"content_type"`
	FetchedAt   time.Time           `json:"fetched_at"`
	// Body is the body (decoded from any Content-Encoding) when it is at
	// most the processor's inline_body_limit; otherwise it is empty and
	// BodyRef says where to get it. JSON carries it as base64.
	Body []byte `json:"body,omitempty"`
	// BodyRef, for a body larger than the inline limit.
	BodyRef *BodyRef `json:"body_ref,omitempty"`
	// BodyLength is the body's length in bytes, inline or not.
	BodyLength int64 `json:"body_length"`
	// Rendered: a browser rendered the page (the campaign's render).
	// Body is then the rendered DOM or, for a processor whose document
	// is "original" (Processor.Document), the document as served. Absent
	// (false) for a page fetched plainly.
	Rendered bool `json:"rendered,omitempty"`
}

// BodyRef is where a body not sent inline is served: GET any of URLs
// (nodes serving the campaign's bodies, by their metrics address); the
// first that answers 200 gives the bytes. A body is kept until every
// processor that wants it has taken its page.
type BodyRef struct {
	URLs   []string `json:"urls"`
	SHA256 string   `json:"sha256"`
	// Token names the body at the BodyServers of its request.
	Token string `json:"token,omitempty"`
}

// ProcessResult is what a processor returns for a batch.
type ProcessResult struct {
	Pages []PageResult `json:"pages"`
}

// PageResult is what a processor made of one page, by its Key. A page
// left out of the result gets no items and is done.
type PageResult struct {
	Key string `json:"key"`
	// Items are JSON objects, stored in Postgres as they are.
	Items []json.RawMessage `json:"items,omitempty"`
	// Links are URLs (absolute, or relative to the page's final URL) to
	// add to the frontier, scoped and deduplicated as discovered links.
	Links []string `json:"links,omitempty"`
	// Error fails this page for the processor at once, without retry.
	Error string `json:"error,omitempty"`
}

// Control activities of processors, run on the control queue.
const (
	LeaseDeliveriesActivity = "LeaseDeliveries"
	StoreProcessedActivity  = "StoreProcessed"
)

// ChunkedBatchWorkflowType is ProcessBatch under the name a campaign at
// processors version 8 starts it by, its pages kept in chunks: a node
// built before chunks does not know the name, so it never runs such a
// child (it would lease no page of a chunk, and call the processor done).
const ChunkedBatchWorkflowType = "ProcessChunkedBatch"

// ProcessBatchRequest starts a ProcessBatch child.
type ProcessBatchRequest struct {
	Lease     DeliveryLeaseRequest `json:"lease"`
	Processor Processor            `json:"processor"`
}

// ProcessBatchResult is what a ProcessBatch child tells the campaign:
// the batches and pages it carried (0 when its first lease found nothing),
// what they stored, and how many pages wait after its last lease.
type ProcessBatchResult struct {
	Batches int                  `json:"batches"`
	Pages   int                  `json:"pages"`
	Waiting int                  `json:"waiting"`
	Stored  StoreProcessedResult `json:"stored"`
	// Error is the processor's last error, from a batch that failed for
	// good.
	Error string `json:"error,omitempty"`
	// LeaseFailed: a lease after the first failed (Postgres away).
	LeaseFailed bool `json:"lease_failed,omitempty"`
}

// DeliveryLeaseRequest asks for a batch of pages for one processor.
type DeliveryLeaseRequest struct {
	CampaignKey int64  `json:"campaign_key"`
	CampaignID  string `json:"campaign_id"`
	Processor   string `json:"processor"`
	// Lease names the batch: asked again for the same lease, the answer
	// is the same pages. Its high 32 bits name the campaign run that
	// leases, its low bits number the run's ProcessBatch children (and,
	// in the low 8, a child's batches).
	Lease int64 `json:"lease"`
	// Reset first returns to pending the pages that runs other than the
	// lease's hold: they were leased by a run that has ended, and the
	// batch carrying them may never come back.
	Reset bool `json:"reset,omitempty"`
	// Release first returns to pending the pages that the batches of
	// ProcessBatch children of the run that failed or were terminated
	// hold, each child named by its first lease: nobody will store them.
	Release []int64 `json:"release,omitempty"`
	// ByReference asks for a batch by reference only (Processor.Batch):
	// when no node serves batches the answer is Unserved, and nothing is
	// leased.
	ByReference bool `json:"by_reference,omitempty"`
	// Held: the batch holds its pages itself, out of the deliveries
	// table until its outcome is stored (see store.Lease). Runs from
	// processors version 4 on lease so; their histories are never run by
	// nodes without it.
	Held bool `json:"held,omitempty"`
}

// LeaseRun is the run part of a lease name.
func LeaseRun(lease int64) int64 { return lease >> 32 }

// DeliveryLease is a batch for a processor: the request to send it, and
// how many of its pages wait (pending, counted up to max_pending) after
// it.
type DeliveryLease struct {
	Request ProcessRequest `json:"request"`
	IDs     []int64        `json:"ids"`
	Waiting int            `json:"waiting"`
	// Unserved answers a lease ByReference that no node could serve.
	Unserved bool `json:"unserved,omitempty"`
}

// StoreProcessedRequest records what a processor made of a batch, or
// (Error set) that the batch failed for good.
type StoreProcessedRequest struct {
	CampaignKey int64   `json:"campaign_key"`
	CampaignID  string  `json:"campaign_id"`
	Processor   string  `json:"processor"`
	IDs         []int64 `json:"ids"`
	// Lease and Held are the batch's lease (DeliveryLeaseRequest): a held
	// lease's outcome is stored by its name.
	Lease int64 `json:"lease,omitempty"`
	Held  bool  `json:"held,omitempty"`
	// Batch is the batch's token when it went by reference: stored, the
	// batch is no longer served.
	Batch  string         `json:"batch,omitempty"`
	Result *ProcessResult `json:"result,omitempty"`
	Error  string         `json:"error,omitempty"`
}

// StoreProcessedResult counts what the store kept.
type StoreProcessedResult struct {
	Processed  int `json:"processed"`
	Failed     int `json:"failed"`
	Items      int `json:"items"`
	Discovered int `json:"discovered"`
}

// ProcessorCounters are a processor's figures as the workflow keeps them.
type ProcessorCounters struct {
	Processed int64 `json:"processed"`
	Failed    int64 `json:"failed"`
	Items     int64 `json:"items"`
	Waiting   int   `json:"waiting"`
	// InFlight counts the batches (ProcessBatch children) under way.
	InFlight  int    `json:"in_flight"`
	Batches   int64  `json:"batches"`
	LastError string `json:"last_error,omitempty"`
}

// ProcessorStatus is one processor as the campaign reports it.
type ProcessorStatus struct {
	Name string `json:"name"`
	ProcessorCounters
}
