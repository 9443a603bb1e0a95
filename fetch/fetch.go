// Package fetch owns HTTP: one GET with connect and total timeouts, a body
// cap that holds after decompression, no redirect following (redirect
// targets go back through the frontier, to be scoped, deduped and routed to
// their own host's node), a verdict on whether a failure is worth
// retrying, and, for a web archive, the exchange's bytes as they crossed
// the connection (Wire). It speaks HTTP/1.1 only, the protocol archives
// record, and undoes content codings itself, beside the bytes it captures.
package fetch

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"mime"
	"net"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// Options bound one request.
type Options struct {
	UserAgent      string
	ConnectTimeout time.Duration
	RequestTimeout time.Duration
	MaxBodyBytes   int64
	// IdleTimeout aborts a body that sends nothing for this long (a
	// slow-body trap); 0 means only RequestTimeout applies.
	IdleTimeout time.Duration
	// KeepBody keeps the body of HTML responses for link extraction; other
	// bodies are only hashed and counted.
	KeepBody bool
	// KeepAnyType keeps the body whatever its type (robots.txt, sitemaps).
	KeepAnyType bool
	// KeepStylesheets keeps text/css bodies too (page requisites: their
	// url()s are requisites again).
	KeepStylesheets bool
	// Capture keeps the exchange's bytes as sent and received
	// (Response.Wire), up to MaxBodyBytes of body plus the headers.
	Capture bool
	// IfNoneMatch and IfModifiedSince make the request conditional: the
	// validators (ETag, Last-Modified) of the version fetched last time.
	// A server whose version is the same answers 304 Not Modified.
	IfNoneMatch, IfModifiedSince string
	// Reached, when set, is called once per Get with Response.ReachedBy as
	// soon as it is known: when the answer's headers are in, before the
	// body is read, or when the request fails (zero if it never went).
	// Politeness counts a host's next request from it.
	Reached func(time.Time)
	// Render, when set, asks a browser fetcher to render the page; the
	// plain Fetcher ignores it.
	Render *Render
}

// ErrStalled is the failure of a body that stopped sending for longer than
// Options.IdleTimeout.
var ErrStalled = errors.New("body stalled")

// Response is the outcome of one GET.
type Response struct {
	Status      int
	ContentType string        // media type, lower case, no parameters
	Location    string        // raw Location header of a redirect
	RetryAfter  time.Duration // from a Retry-After header (seconds or a date), 0 if none
	Body        []byte        // HTML bodies when KeepBody, capped at MaxBodyBytes, content coding undone
	Length      int64         // bytes read (after decompression)
	Truncated   bool          // the body was longer than MaxBodyBytes; only that much was read
	Digest      string        // sha256:<hex> of the bytes read
	Duration    time.Duration
	// Sent is when the request was sent.
	Sent time.Time
	// ReachedBy is when the host surely had the request: when its answer
	// began (the first response byte), or, written and never answered,
	// when the request failed. Not when it was written: a busy server may
	// take a written request in late, on a kept-alive connection as on a
	// new one, and the next request must not reach it closer than its
	// delay. Zero if it never went. Politeness counts a host's gaps from
	// here.
	ReachedBy time.Time
	// Header is the response's, parsed; Content-Encoding and
	// Content-Length are as received.
	Header http.Header
	// Wire is the exchange as it crossed the connection, with
	// Options.Capture; nil without, or when no connection was made.
	Wire *Wire
	// Err is a transport failure: no status, or the body broke off; or
	// (ErrRender) a render that failed.
	Err error
	// Rendered is set when a browser rendered the page: Body is then the
	// rendered DOM.
	Rendered *Rendered
}

// reachedBy traces when the host surely had a request (Response.ReachedBy).
type reachedBy struct {
	wrote     atomic.Bool
	firstByte atomic.Int64
}

func (r *reachedBy) trace(cp *capture) *httptrace.ClientTrace {
	return &httptrace.ClientTrace{
		GotConn: func(c httptrace.GotConnInfo) {
			if tc, ok := c.Conn.(*tapConn); ok && cp != nil {
				tc.attach(cp)
			}
		},
		WroteRequest:         func(httptrace.WroteRequestInfo) { r.wrote.Store(true) },
		GotFirstResponseByte: func() { r.firstByte.Store(time.Now().UnixNano()) },
	}
}

// at is the first response byte's time; for a request written and never
// answered, now (its failure); zero for one never written.
func (r *reachedBy) at() time.Time {
	if ns := r.firstByte.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	if r.wrote.Load() {
		return time.Now()
	}
	return time.Time{}
}

// IsHTML says whether the response is a document to take links from.
func (r *Response) IsHTML() bool {
	return r.ContentType == "text/html" || r.ContentType == "application/xhtml+xml"
}

// IsStylesheet says whether the response is CSS.
func (r *Response) IsStylesheet() bool { return r.ContentType == "text/css" }

// Fetcher makes requests over one shared transport, so connections to a
// host are reused across batches and campaigns.
type Fetcher struct {
	client *http.Client
	// dialer makes every connection, resolving names itself; its Control
	// hook is the guard. The package's tests give it a resolver of their
	// own, to make names resolve inward.
	dialer *net.Dialer
	// roots verifies servers' certificates; nil is the system's. The
	// package's tests trust their own server with it.
	roots *x509.CertPool
}

type connectTimeoutKey struct{}

// New returns a Fetcher keeping up to idlePerHost idle connections a host
// and connecting only where guard allows.
func New(idlePerHost int, guard Guard) *Fetcher {
	f := &Fetcher{dialer: &net.Dialer{KeepAlive: 30 * time.Second, Control: guard.control}}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		d := *f.dialer
		if t, ok := ctx.Value(connectTimeoutKey{}).(time.Duration); ok {
			d.Timeout = t
		}
		return d.DialContext(ctx, network, addr)
	}
	transport := &http.Transport{
		Proxy: nil, // a crawler goes direct; a proxy is an explicit choice
		// Every connection is tapped (see Wire); taps copy only for a
		// request that asks them to.
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &tapConn{Conn: c}, nil
		},
		DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return dialTLS(ctx, dial, f.roots, network, addr)
		},
		MaxIdleConns:           idlePerHost * 64,
		MaxIdleConnsPerHost:    idlePerHost,
		IdleConnTimeout:        90 * time.Second,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: maxHeaderBytes,
	}
	f.client = &http.Client{
		Transport: transport,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	return f
}

// Get fetches url. It never returns an error: failures are in Response.Err
// or the status, for Classify to judge.
func (f *Fetcher) Get(ctx context.Context, url string, o Options) Response {
	start := time.Now()
	ctx = context.WithValue(ctx, connectTimeoutKey{}, o.ConnectTimeout)
	ctx, cancel := context.WithTimeout(ctx, o.RequestTimeout)
	defer cancel()
	req, err := newRequest(ctx, url, o)
	if err != nil {
		if o.Reached != nil {
			o.Reached(time.Time{}) // it never went
		}
		return Response{Err: fmt.Errorf("build request: %w", err)}
	}
	var cp *capture
	if o.Capture {
		cp = newCapture(o.MaxBodyBytes + maxHeaderBytes + captureSlack)
	}
	r, complete := f.exchange(req, cancel, cp, o, start)
	if cp != nil {
		r.Wire = cp.finish(complete) // after the body is closed: the exchange is over
	}
	return r
}

// newRequest builds the GET that o describes.
func newRequest(ctx context.Context, url string, o Options) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", o.UserAgent)
	req.Header.Set("Accept", "text/html,application/xhtml+xml;q=0.9,*/*;q=0.5")
	// Asked for here, not left to the transport, so that the transport
	// leaves the body as sent: readBody decodes it, beside the capture.
	req.Header.Set("Accept-Encoding", "gzip")
	if o.IfNoneMatch != "" {
		req.Header.Set("If-None-Match", o.IfNoneMatch)
	}
	if o.IfModifiedSince != "" {
		req.Header.Set("If-Modified-Since", o.IfModifiedSince)
	}
	return req, nil
}

// exchange sends req, started at start, and reads its answer, calling
// o.Reached once the host surely has it; cancel ends the request (when the
// body stalls). complete says the whole response was read (see
// capture.finish).
func (f *Fetcher) exchange(req *http.Request, cancel context.CancelFunc, cp *capture, o Options, start time.Time) (r Response, complete bool) {
	r.Sent = start
	var reached reachedBy
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), reached.trace(cp)))
	resp, err := f.client.Do(req)
	r.ReachedBy = reached.at()
	if o.Reached != nil {
		o.Reached(r.ReachedBy)
	}
	if err != nil {
		r.Err, r.Duration = err, time.Since(start)
		return r, false
	}
	defer resp.Body.Close()
	r.Status, r.Header = resp.StatusCode, resp.Header
	r.Location = resp.Header.Get("Location")
	r.RetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	if mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type")); err == nil {
		r.ContentType = strings.ToLower(mt)
	}
	complete, err = r.readBody(resp, o, cancel)
	r.Duration = time.Since(start)
	if err != nil {
		r.Err = fmt.Errorf("read body: %w", err)
	}
	return r, complete
}

// readBody reads resp's body up to o.MaxBodyBytes, undoing its content
// coding, into Length, Truncated and Digest, and into Body when o keeps
// bodies of its type (sniffed when the header gave none). cancel aborts a
// body silent for o.IdleTimeout. complete says the body was read to its
// end.
func (r *Response) readBody(resp *http.Response, o Options, cancel context.CancelFunc) (complete bool, err error) {
	h := sha256.New()
	keep := o.KeepAnyType || o.KeepBody && (r.IsHTML() || r.ContentType == "") || o.KeepStylesheets && r.IsStylesheet()
	var raw io.Reader = resp.Body
	var stalled atomic.Bool
	if o.IdleTimeout > 0 {
		idle := time.AfterFunc(o.IdleTimeout, func() { stalled.Store(true); cancel() })
		defer idle.Stop()
		raw = &idleReader{r: resp.Body, timer: idle, after: o.IdleTimeout}
	}
	body, err := decoded(raw, resp.Header.Get("Content-Encoding"))
	if err != nil {
		// A coding this side cannot undo: the bytes are read (for the
		// archive) but are no document to take links from.
		body, keep = raw, false
	}
	r.Body, r.Length, r.Truncated, err = readCapped(body, o.MaxBodyBytes, h, keep)
	if err == nil && !r.Truncated {
		// A decoder may stop at the end of its stream before the body's
		// own end (the last chunk, bytes after the stream): read on to it,
		// so the capture holds the whole response.
		n, derr := io.Copy(io.Discard, io.LimitReader(raw, captureSlack))
		complete = derr == nil && n < captureSlack
	}
	if err != nil && stalled.Load() {
		err = fmt.Errorf("%w: nothing for %v after %d bytes", ErrStalled, o.IdleTimeout, r.Length)
	}
	if r.ContentType == "" && len(r.Body) > 0 {
		// No Content-Type: sniff it, as browsers do.
		r.ContentType, _, _ = mime.ParseMediaType(http.DetectContentType(r.Body))
	}
	if !r.IsHTML() && !o.KeepAnyType && !(o.KeepStylesheets && r.IsStylesheet()) {
		r.Body = nil
	}
	r.Digest = "sha256:" + hex.EncodeToString(h.Sum(nil))
	return complete, err
}

const (
	// maxHeaderBytes bounds a response's header block.
	maxHeaderBytes = 1 << 20
	// captureSlack is room in a capture for chunk framing beyond the body
	// cap; a response that needs more is archived truncated.
	captureSlack = 64 << 10
)

// parseRetryAfter reads a Retry-After header: delay-seconds or an
// HTTP-date.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.Atoi(v); err == nil {
		if secs < 0 {
			return 0
		}
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// idleReader pushes back its timer on every read that yields bytes.
type idleReader struct {
	r     io.Reader
	timer *time.Timer
	after time.Duration
}

func (i *idleReader) Read(p []byte) (int, error) {
	n, err := i.r.Read(p)
	if n > 0 {
		i.timer.Reset(i.after)
	}
	return n, err
}

// readCapped reads at most max bytes (after the transport's decompression,
// so a gzip bomb stops at the cap) and reports whether more were there.
func readCapped(body io.Reader, max int64, h hash.Hash, keep bool) ([]byte, int64, bool, error) {
	var buf []byte
	chunk := make([]byte, 32<<10)
	var n int64
	for n < max {
		want := int64(len(chunk))
		if rest := max - n; rest < want {
			want = rest
		}
		k, err := body.Read(chunk[:want])
		if k > 0 {
			h.Write(chunk[:k])
			if keep {
				buf = append(buf, chunk[:k]...)
			}
			n += int64(k)
		}
		if errors.Is(err, io.EOF) {
			return buf, n, false, nil
		}
		if err != nil {
			return buf, n, false, err
		}
	}
	// At the cap: one more byte says whether the body was longer.
	var one [1]byte
	k, _ := body.Read(one[:])
	return buf, n, k > 0, nil
}

// Verdict is what to do after a response.
type Verdict int

const (
	// Done: record the response (2xx, 3xx and other final answers).
	Done Verdict = iota
	// Final: a failure no retry will fix (4xx but 408 and 429).
	Final
	// Transient: worth retrying later (5xx, 408, 429, network errors).
	Transient
)

// Classify judges a response. nonRetryable lists statuses to treat as
// final even though they are usually transient.
func Classify(r *Response, nonRetryable []int) Verdict {
	if r.Err != nil {
		if errors.Is(r.Err, ErrRender) {
			return Final // it would spin again
		}
		if r.Status != 0 {
			return Transient // the body broke off mid-way
		}
		if permanentTransportError(r.Err) {
			return Final
		}
		return Transient
	}
	for _, s := range nonRetryable {
		if s == r.Status {
			return Final
		}
	}
	switch {
	case r.Status == http.StatusRequestTimeout || r.Status == http.StatusTooManyRequests || r.Status >= 500:
		return Transient
	case r.Status >= 400:
		return Final
	}
	return Done
}

// permanentTransportError is true for failures that will not change on
// retry: bad URLs, unknown hosts, certificate errors.
func permanentTransportError(err error) bool {
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return dnsErr.IsNotFound
	}
	if errors.Is(err, ErrBlocked) {
		return true
	}
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.ErrUnexpectedEOF) {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "x509:") || strings.Contains(msg, "unsupported protocol scheme") ||
		strings.Contains(msg, "tls: ")
}

// Describe renders a failure for frontier.last_error.
func Describe(r *Response) string {
	if r.Err != nil {
		if errors.Is(r.Err, ErrStalled) {
			return "timeout: " + r.Err.Error()
		}
		var blocked *BlockedError
		if errors.As(r.Err, &blocked) {
			return blocked.Error()
		}
		var ne net.Error
		if errors.As(r.Err, &ne) && ne.Timeout() || errors.Is(r.Err, context.DeadlineExceeded) {
			return "timeout: " + r.Err.Error()
		}
		return r.Err.Error()
	}
	return fmt.Sprintf("HTTP %d %s", r.Status, http.StatusText(r.Status))
}
