// Package fetch owns HTTP: one GET with connect and total timeouts, a body
// cap that holds after decompression, no redirect following (redirect
// targets go back through the frontier, to be scoped, deduped and routed to
// their own host's node), and a verdict on whether a failure is worth
// retrying.
package fetch

import (
	"context"
	"crypto/sha256"
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
	Body        []byte        // HTML bodies when KeepBody, capped at MaxBodyBytes
	Length      int64         // bytes read (after decompression)
	Truncated   bool          // the body was longer than MaxBodyBytes; only that much was read
	Digest      string        // sha256:<hex> of the bytes read
	Duration    time.Duration
	// The exchange as it went, for archiving (see package archive): when
	// the request was sent, the request and response headers, the
	// protocol, and whether the transport decompressed the body.
	Sent time.Time
	// ReachedBy is when the host surely had the request: when it was
	// written, on a connection the host had already accepted; when the
	// answer began, on a new one (a busy server may take a while to accept
	// it). Zero if it never went. Politeness counts a host's gaps from here.
	ReachedBy     time.Time
	RequestHeader http.Header
	Header        http.Header
	Proto         string
	Decompressed  bool
	// Err is a transport failure: no status, or the body broke off.
	Err error
}

// reachedBy traces when the host surely had a request (Response.ReachedBy).
type reachedBy struct {
	reused    atomic.Bool
	wrote     atomic.Int64
	firstByte atomic.Int64
}

func (r *reachedBy) trace() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{
		GotConn:              func(c httptrace.GotConnInfo) { r.reused.Store(c.Reused) },
		WroteRequest:         func(httptrace.WroteRequestInfo) { r.wrote.Store(time.Now().UnixNano()) },
		GotFirstResponseByte: func() { r.firstByte.Store(time.Now().UnixNano()) },
	}
}

func (r *reachedBy) at() time.Time {
	ns := r.wrote.Load()
	if !r.reused.Load() {
		if fb := r.firstByte.Load(); fb != 0 {
			ns = fb
		}
	}
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// IsHTML says whether the response is a document to take links from.
func (r *Response) IsHTML() bool {
	return r.ContentType == "text/html" || r.ContentType == "application/xhtml+xml"
}

// Fetcher makes requests over one shared transport, so connections to a
// host are reused across batches and campaigns.
type Fetcher struct {
	client *http.Client
	// dialer makes every connection, resolving names itself; its Control
	// hook is the guard. The package's tests give it a resolver of their
	// own, to make names resolve inward.
	dialer *net.Dialer
}

type connectTimeoutKey struct{}

// New returns a Fetcher keeping up to idlePerHost idle connections a host
// and connecting only where guard allows.
func New(idlePerHost int, guard Guard) *Fetcher {
	f := &Fetcher{dialer: &net.Dialer{KeepAlive: 30 * time.Second, Control: guard.control}}
	transport := &http.Transport{
		Proxy: nil, // a crawler goes direct; a proxy is an explicit choice
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			d := *f.dialer
			if t, ok := ctx.Value(connectTimeoutKey{}).(time.Duration); ok {
				d.Timeout = t
			}
			return d.DialContext(ctx, network, addr)
		},
		MaxIdleConns:          idlePerHost * 64,
		MaxIdleConnsPerHost:   idlePerHost,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		ForceAttemptHTTP2:     true,
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
	var r Response
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		r.Err = fmt.Errorf("build request: %w", err)
		return r
	}
	req.Header.Set("User-Agent", o.UserAgent)
	req.Header.Set("Accept", "text/html,application/xhtml+xml;q=0.9,*/*;q=0.5")
	r.Sent, r.RequestHeader = start, req.Header
	var reached reachedBy
	req = req.WithContext(httptrace.WithClientTrace(ctx, reached.trace()))
	resp, err := f.client.Do(req)
	r.ReachedBy = reached.at()
	if err != nil {
		r.Err, r.Duration = err, time.Since(start)
		return r
	}
	defer resp.Body.Close()
	r.Status, r.Header, r.Proto, r.Decompressed = resp.StatusCode, resp.Header, resp.Proto, resp.Uncompressed
	if resp.Uncompressed {
		r.RequestHeader = req.Header.Clone()
		r.RequestHeader.Set("Accept-Encoding", "gzip") // the transport's own
	}
	r.Location = resp.Header.Get("Location")
	r.RetryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	if mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type")); err == nil {
		r.ContentType = strings.ToLower(mt)
	}
	h := sha256.New()
	keep := o.KeepAnyType || o.KeepBody && (r.IsHTML() || r.ContentType == "")
	var body io.Reader = resp.Body
	var stalled atomic.Bool
	if o.IdleTimeout > 0 {
		idle := time.AfterFunc(o.IdleTimeout, func() { stalled.Store(true); cancel() })
		defer idle.Stop()
		body = &idleReader{r: resp.Body, timer: idle, after: o.IdleTimeout}
	}
	r.Body, r.Length, r.Truncated, err = readCapped(body, o.MaxBodyBytes, h, keep)
	if err != nil && stalled.Load() {
		err = fmt.Errorf("%w: nothing for %v after %d bytes", ErrStalled, o.IdleTimeout, r.Length)
	}
	if r.ContentType == "" && len(r.Body) > 0 {
		// No Content-Type: sniff it, as browsers do.
		r.ContentType, _, _ = mime.ParseMediaType(http.DetectContentType(r.Body))
	}
	if !r.IsHTML() && !o.KeepAnyType {
		r.Body = nil
	}
	r.Digest = "sha256:" + hex.EncodeToString(h.Sum(nil))
	r.Duration = time.Since(start)
	if err != nil {
		r.Err = fmt.Errorf("read body: %w", err)
	}
	return r
}

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
