// Package processor is spiderpool's Go API for user code that runs on every
// page of a campaign, in the manner of Colly's callbacks: register OnHTML
// and OnPage handlers that return items and links, and Run.
//
//	p := processor.New("products")
//	p.OnHTML("div.product", func(e *processor.Element) error {
//		return e.Page.Item(map[string]string{"name": e.ChildText(".name"), "price": e.ChildText(".price")})
//	})
//	log.Fatal(p.Run(context.Background()))
//
// A processor is a Temporal activity: Run polls its task queue (Queue)
// for batches of pages the campaign sends it, as named in the campaign
// spec (Spec gives the entry). Temporal retries a batch whose handler
// fails, with the spec's retry policy; items are stored once per page
// whatever the number of attempts. The same activity can be written in
// any Temporal SDK language (see examples/).
package processor

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/PuerkitoBio/goquery"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/config"
	"github.com/spiderpool/spiderpool/control"
)

// QueuePrefix starts the default task queue of a processor.
const QueuePrefix = "spiderpool.processor."

// Processor holds a processor's handlers. Build it with New, register
// handlers, then Run it (or Register it on a worker of your own).
type Processor struct {
	name  string
	queue string
	html  []htmlHandler
	pages []func(*Page) error
	log   *slog.Logger
	// bodies fetches bodies and batches sent by reference, presenting
	// secret, the node secret (see NodeSecret).
	bodies    *http.Client
	secret    string
	secretErr error
}

type htmlHandler struct {
	selector string
	fn       func(*Element) error
}

// New returns a processor named name: its activity type, and with the
// default queue "spiderpool.processor.<name>", its task queue.
// The node secret it presents to nodes for bodies and batches comes from
// SPIDERPOOL_NODE_SECRET or the file SPIDERPOOL_NODE_SECRET_FILE names.
func New(name string) *Processor {
	secret, err := config.NodeSecret("")
	return &Processor{
		name: name, queue: QueuePrefix + name, log: slog.Default(),
		bodies: &http.Client{Timeout: time.Minute},
		secret: secret, secretErr: err,
	}
}

// NodeSecret sets the secret the processor presents to nodes for page
// bodies and batches sent by reference, instead of the environment's.
func (p *Processor) NodeSecret(secret string) *Processor {
	p.secret, p.secretErr = secret, nil
	return p
}

// Queue sets the task queue the processor polls.
func (p *Processor) Queue(queue string) *Processor { p.queue = queue; return p }

// Logger sets where the processor logs.
func (p *Processor) Logger(l *slog.Logger) *Processor { p.log = l; return p }

// Log is where the processor logs (see Logger).
func (p *Processor) Log() *slog.Logger { return p.log }

// Name is the processor's activity type.
func (p *Processor) Name() string { return p.name }

// Spec is the processor's entry for a campaign spec's "processors": its
// name, task queue and activity type; the other fields take defaults.
func (p *Processor) Spec() campaign.Processor {
	return campaign.Processor{Name: p.name, TaskQueue: p.queue, Activity: p.name}
}

// OnPage registers fn for every page the processor gets, HTML or not.
func (p *Processor) OnPage(fn func(*Page) error) *Processor {
	p.pages = append(p.pages, fn)
	return p
}

// OnHTML registers fn for every element matching the CSS selector in each
// HTML page, in document order.
func (p *Processor) OnHTML(selector string, fn func(*Element) error) *Processor {
	p.html = append(p.html, htmlHandler{selector: selector, fn: fn})
	return p
}

// Page is one page a processor got. Item and Follow add to what the
// processor returns for it. Of a page a browser rendered (Rendered set),
// Body is the rendered DOM, or the document as served when the
// processor's spec entry says "document": "original"
// (campaign.Processor.Document).
type Page struct {
	campaign.ProcessPage
	items []json.RawMessage
	links []string
	doc   *goquery.Document
}

// Item adds one item (anything encoding/json can write as an object).
func (pg *Page) Item(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("item of %s: %w", pg.URL, err)
	}
	if len(b) == 0 || b[0] != '{' {
		return fmt.Errorf("item of %s: want a JSON object, got %.40s", pg.URL, b)
	}
	pg.items = append(pg.items, b)
	return nil
}

// Follow adds a URL (absolute, or relative to the page) to the campaign's
// frontier, under its scope, as a link of this page.
func (pg *Page) Follow(url string) { pg.links = append(pg.links, url) }

// Document is the page parsed as HTML, or nil when it is not HTML.
func (pg *Page) Document() *goquery.Document { return pg.doc }

// Element is one element an OnHTML selector matched.
type Element struct {
	*goquery.Selection
	Page *Page
}

// Text is the element's text, trimmed.
func (e *Element) Text() string { return strings.TrimSpace(e.Selection.Text()) }

// Attr is the value of the element's attribute, or "".
func (e *Element) Attr(name string) string { return e.AttrOr(name, "") }

// ChildText is the trimmed text of the element's descendants matching
// selector.
func (e *Element) ChildText(selector string) string {
	return strings.TrimSpace(e.Find(selector).Text())
}

// ChildAttr is the attribute of the first descendant matching selector.
func (e *Element) ChildAttr(selector, name string) string {
	return e.Find(selector).First().AttrOr(name, "")
}

// Process is the activity: it runs the handlers on each page of a batch.
// A handler's error (or panic) fails the batch, and Temporal tries it
// again; PageError fails only its page, at once.
func (p *Processor) Process(ctx context.Context, req campaign.ProcessRequest) (campaign.ProcessResult, error) {
	if req.Batch != nil && len(req.Pages) == 0 {
		var err error
		if req, err = p.fetchBatch(ctx, req.Batch); err != nil {
			return campaign.ProcessResult{}, err
		}
	}
	began := time.Now()
	out := campaign.ProcessResult{Pages: make([]campaign.PageResult, 0, len(req.Pages))}
	fetchedTo := 0 // bodies by reference are fetched up to here
	for i := range req.Pages {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		if i >= fetchedTo {
			fetchedTo = p.fetchBodies(ctx, req, i)
		}
		pg := &Page{ProcessPage: req.Pages[i]}
		req.Pages[i].Body = nil // the page holds it now, and drops it when done
		err := p.page(ctx, pg)
		var pe *PageError
		switch {
		case errors.As(err, &pe):
			out.Pages = append(out.Pages, campaign.PageResult{Key: pg.Key, Error: pe.Error()})
			continue
		case err != nil:
			return campaign.ProcessResult{}, fmt.Errorf("%s: %w", pg.URL, err)
		}
		if len(pg.items) > 0 || len(pg.links) > 0 {
			// A page left out is done with nothing: its result would only
			// add to the campaign's history (a no-op batch of 500 wrote
			// 12 KB of keys there, and a 100,000-page campaign continued
			// as new for the bytes).
			out.Pages = append(out.Pages, campaign.PageResult{Key: pg.Key, Items: pg.items, Links: pg.links})
		}
		if activity.IsActivity(ctx) && time.Since(began) >= quietFor {
			activity.RecordHeartbeat(ctx, i)
		}
	}
	return out, nil
}

// quietFor is how long a batch runs before it heartbeats (which lets it
// hear that its campaign was cancelled). Each heartbeat is a write to the
// workflow's state on the Temporal server, and a batch that finishes
// sooner has no use for one: a no-op batch of 500 pages takes
// milliseconds.
const quietFor = 5 * time.Second

// PageError fails one page for the processor without failing its batch.
type PageError struct{ Err error }

func (e *PageError) Error() string { return e.Err.Error() }
func (e *PageError) Unwrap() error { return e.Err }

func (p *Processor) page(ctx context.Context, pg *Page) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panicked: %v", r)
		}
	}()
	if pg.Body == nil && pg.BodyRef != nil {
		if pg.Body, err = p.fetchBody(ctx, pg.BodyRef); err != nil {
			return err
		}
	}
	for _, fn := range p.pages {
		if err := fn(pg); err != nil {
			return err
		}
	}
	if len(p.html) == 0 || !isHTML(pg.ContentType) {
		return nil
	}
	if pg.doc, err = goquery.NewDocumentFromReader(strings.NewReader(string(pg.Body))); err != nil {
		return &PageError{Err: fmt.Errorf("parse HTML: %w", err)}
	}
	for _, h := range p.html {
		var herr error
		pg.doc.Find(h.selector).EachWithBreak(func(_ int, s *goquery.Selection) bool {
			herr = h.fn(&Element{Selection: s, Page: pg})
			return herr == nil
		})
		if herr != nil {
			return herr
		}
	}
	return nil
}

func isHTML(contentType string) bool {
	ct := strings.ToLower(contentType)
	return strings.HasPrefix(ct, "text/html") || strings.HasPrefix(ct, "application/xhtml+xml")
}

// bulkBodyBytes bounds the bodies fetched in one request.
const bulkBodyBytes = 8 << 20

// fetchBodies gets, in one request to a body server, the bodies sent by
// reference of the pages from i on, up to bulkBodyBytes, and puts them in
// the request. It returns the index of the first page it did not cover.
// A body it could not get is left for fetchBody, page by page, which
// reports why.
func (p *Processor) fetchBodies(ctx context.Context, req campaign.ProcessRequest, i int) int {
	var tokens []string
	var want []int
	end, size := i, int64(0)
	for ; end < len(req.Pages) && len(tokens) < campaign.MaxBodiesPerRequest; end++ {
		pg := &req.Pages[end]
		if pg.Body != nil || pg.BodyRef == nil || pg.BodyRef.Token == "" {
			continue
		}
		if size > 0 && size+pg.BodyLength > bulkBodyBytes {
			break
		}
		size += pg.BodyLength
		tokens = append(tokens, pg.BodyRef.Token)
		want = append(want, end)
	}
	if len(tokens) < 2 {
		return end // one body (or none): fetchBody gets it
	}
	for _, server := range req.BodyServers {
		bodies, err := p.postBodies(ctx, server, tokens)
		if err != nil {
			p.log.Warn("bodies by reference: a node failed; trying the next", "node", server, "error", err)
			continue
		}
		for _, k := range want {
			pg := &req.Pages[k]
			if body, ok := bodies[pg.BodyRef.Token]; ok && sha256Hex(body) == pg.BodyRef.SHA256 {
				pg.Body = body
			}
		}
		break
	}
	return end
}

// postBodies asks server for the bodies tokens name (see
// campaign.ProcessRequest.BodyServers).
func (p *Processor) postBodies(ctx context.Context, server string, tokens []string) (map[string][]byte, error) {
	payload, err := json.Marshal(tokens)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, server, bytes.NewReader(payload))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.askNode(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return readBodies(bufio.NewReader(resp.Body), len(tokens))
}

// askNode sends a request to a node's body or batch endpoint: an answer
// other than 200 is an error, with the start of what the node said.
func (p *Processor) askNode(req *http.Request) (*http.Response, error) {
	if p.secretErr != nil {
		return nil, p.secretErr
	}
	if p.secret != "" {
		req.Header.Set("Authorization", "Bearer "+p.secret)
	}
	resp, err := p.bodies.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		err := fmt.Errorf("%s %s: %s: %s", req.Method, req.URL, resp.Status, bytes.TrimSpace(msg))
		if resp.StatusCode == http.StatusUnauthorized && p.secret == "" {
			err = fmt.Errorf("%w (this processor has no node secret: set %s or %s as the nodes have it)",
				err, config.EnvNodeSecret, config.EnvNodeSecretFile)
		}
		return nil, err
	}
	return resp, nil
}

// readBodies reads n framed bodies: "<token> <length>\n" and length bytes,
// or "<token> -1\n" for one the server does not have.
func readBodies(r *bufio.Reader, n int) (map[string][]byte, error) {
	out := make(map[string][]byte, n)
	for range n {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, fmt.Errorf("bodies: read a frame header: %w", err)
		}
		token, length, ok := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
		size, err := strconv.ParseInt(length, 10, 64)
		if !ok || err != nil || size < -1 || size > 1<<31 {
			return nil, fmt.Errorf("bodies: bad frame header %q", line)
		}
		if size < 0 {
			continue
		}
		body := make([]byte, size)
		if _, err := io.ReadFull(r, body); err != nil {
			return nil, fmt.Errorf("bodies: body of %s: %w", token, err)
		}
		out[token] = body
	}
	return out, nil
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// fetchBatch gets a batch sent by reference from the first node that
// serves it: the request with its pages, their bodies by reference.
func (p *Processor) fetchBatch(ctx context.Context, ref *campaign.BatchRef) (campaign.ProcessRequest, error) {
	var errs []error
	for _, u := range ref.URLs {
		req, err := p.getBatch(ctx, u)
		if err == nil && len(req.Pages) != ref.Pages {
			err = fmt.Errorf("GET %s: %d pages, want %d", u, len(req.Pages), ref.Pages)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		return req, nil
	}
	if len(ref.URLs) == 0 {
		return campaign.ProcessRequest{}, errors.New("batch sent by reference, but no node serves batches")
	}
	return campaign.ProcessRequest{}, fmt.Errorf("batch %s by reference: %w", ref.Token, errors.Join(errs...))
}

// getBatch gets a batch from one node, asking for its bodies after its
// pages (see campaign.AppendedBatchType): a node gives the ones that fit
// (see activities.BatchHandler), and one that does not know the query
// answers with JSON alone, its bodies by reference.
func (p *Processor) getBatch(ctx context.Context, u string) (campaign.ProcessRequest, error) {
	var out campaign.ProcessRequest
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u+"?bodies=appended", nil)
	if err != nil {
		return out, err
	}
	resp, err := p.askNode(req)
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Type") == campaign.AppendedBatchType {
		err = readAppendedBatch(bufio.NewReaderSize(resp.Body, 64<<10), &out)
	} else {
		err = json.NewDecoder(resp.Body).Decode(&out)
	}
	if err != nil {
		return out, fmt.Errorf("GET %s: %w", u, err)
	}
	return out, nil
}

// readAppendedBatch reads a batch served as campaign.AppendedBatchType
// into out: its line of JSON, then the bodies of the pages without a
// body_ref, which it puts in their pages.
func readAppendedBatch(r *bufio.Reader, out *campaign.ProcessRequest) error {
	line, err := r.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("read the batch's pages: %w", err)
	}
	if err := json.Unmarshal(line, out); err != nil {
		return fmt.Errorf("the batch's pages: %w", err)
	}
	var total int64
	for _, pg := range out.Pages {
		if pg.BodyRef == nil {
			if pg.BodyLength < 0 || pg.BodyLength > campaign.MaxInlineBodyLimit {
				return fmt.Errorf("page %s: an appended body of %d bytes", pg.Key, pg.BodyLength)
			}
			total += pg.BodyLength
		}
	}
	all := make([]byte, total) // one allocation for the batch's bodies
	if _, err := io.ReadFull(r, all); err != nil {
		return fmt.Errorf("read the batch's %d bytes of bodies: %w", total, err)
	}
	for i := range out.Pages {
		if pg := &out.Pages[i]; pg.BodyRef == nil {
			pg.Body, all = all[:pg.BodyLength:pg.BodyLength], all[pg.BodyLength:]
		}
	}
	return nil
}

// fetchBody gets a body sent by reference from the first node that has
// it, and checks its digest.
func (p *Processor) fetchBody(ctx context.Context, ref *campaign.BodyRef) ([]byte, error) {
	var errs []error
	for _, u := range ref.URLs {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		resp, err := p.askNode(req)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("GET %s: %w", u, err))
			continue
		}
		if got := sha256Hex(body); got != ref.SHA256 {
			errs = append(errs, fmt.Errorf("GET %s: sha256 %s, want %s", u, got, ref.SHA256))
			continue
		}
		return body, nil
	}
	if len(ref.URLs) == 0 {
		return nil, errors.New("body sent by reference, but no node serves bodies (start nodes with --bodies-addr)")
	}
	return nil, fmt.Errorf("body by reference: %w", errors.Join(errs...))
}

// Register adds the processor's activity to a worker of your own, which
// must poll the processor's Queue.
func (p *Processor) Register(w worker.Registry) {
	w.RegisterActivityWithOptions(p.Process, activity.RegisterOptions{Name: p.name})
}

// Option changes how Run runs.
type Option func(*runOptions)

type runOptions struct {
	client      client.Client
	concurrency int
}

// WithClient runs on an existing Temporal client instead of dialing one
// from the environment.
func WithClient(c client.Client) Option { return func(o *runOptions) { o.client = c } }

// WithConcurrency caps the batches the processor runs at once (default 4).
func WithConcurrency(n int) Option { return func(o *runOptions) { o.concurrency = n } }

// Run polls the processor's queue until ctx is done or the process gets
// SIGINT or SIGTERM. Without WithClient it connects to Temporal as the
// spiderpool CLI does: TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE and the rest
// of the environment (see docs/operations.md, "Configuration"). To run a
// spiderpool node in the same process too, see package colocate.
func (p *Processor) Run(ctx context.Context, opts ...Option) error {
	o := runOptions{concurrency: 4}
	for _, opt := range opts {
		opt(&o)
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := config.FromEnv()
	if err != nil {
		return err
	}
	if o.client == nil {
		c, err := control.Dial(ctx, cfg, p.log)
		if err != nil {
			return err
		}
		defer c.Close()
		o.client = c
	}
	w := worker.New(o.client, p.queue, worker.Options{MaxConcurrentActivityExecutionSize: o.concurrency})
	p.Register(w)
	if err := w.Start(); err != nil {
		return fmt.Errorf("processor %s on %s: %w", p.name, p.queue, err)
	}
	p.log.Info("processor running", "processor", p.name, "queue", p.queue)
	<-ctx.Done()
	w.Stop()
	return nil
}
