package render

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdpfetch "github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/inspector"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"

	"github.com/spiderpool/spiderpool/fetch"
)

const (
	defaultTimeout = 30 * time.Second
	// quietFor is how long no request may be in flight for the network
	// to count as idle.
	quietFor = 500 * time.Millisecond
	// defaultIdleCap and defaultScrollWait bound the idle waits when the
	// spec leaves them at zero.
	defaultIdleCap    = 5 * time.Second
	defaultScrollWait = 2 * time.Second
	// closeWait is how long a tab may take to close before its whole
	// browser is killed: a renderer stuck in a script can hold it open.
	closeWait = 2 * time.Second
	// resourcesAtOnce bounds a page's requests fetched at the same time,
	// as browsers bound their connections to a host.
	resourcesAtOnce = 6
)

var (
	errTimeout = errors.New("timeout")
	errCrashed = errors.New("the tab crashed")
)

// Get fetches url through Options.Plain and, when o.Render is set and the
// answer is a 2xx HTML document (with o.Render.Auto, a script shell:
// IsScriptShell), renders it: Body becomes the DOM its scripts left,
// Rendered holds the document as served and every request the page made.
// Status, headers, Wire, ReachedBy, Digest and Length are the document's
// plain fetch's. A render that fails returns the document as served with
// an Err wrapping fetch.ErrRender.
func (b *Browser) Get(ctx context.Context, url string, o fetch.Options) fetch.Response {
	if o.Render == nil {
		return b.o.Plain.Get(ctx, url, o)
	}
	start := time.Now()
	docOpts := o
	docOpts.KeepBody = true // the browser needs the document to render it
	doc := b.o.Plain.Get(ctx, url, docOpts)
	if doc.Err != nil || doc.Status < 200 || doc.Status > 299 || !doc.IsHTML() {
		return doc
	}
	if o.Render.Auto && !IsScriptShell(doc.Body) {
		b.o.Log.Debug("not rendered: no script shell (spec.render.auto)", "campaign", o.Render.Group, "url", url)
		return doc
	}
	resp := b.render(ctx, url, o, doc)
	resp.Duration = time.Since(start)
	return resp
}

// render renders doc, fetched from url, in a tab of its own.
func (b *Browser) render(ctx context.Context, url string, o fetch.Options, doc fetch.Response) fetch.Response {
	// Waits end with an error that is not ErrRender: the page is not at
	// fault.
	if o.Render.Tabs > 0 {
		g := b.group(o.Render.Group, o.Render.Tabs)
		if err := acquire(ctx, g); err != nil {
			doc.Err = fmt.Errorf("render: waiting for one of the campaign's tabs (spec.render.tabs): %w", err)
			return doc
		}
		defer func() { <-g }()
	}
	if err := acquire(ctx, b.tabs); err != nil {
		doc.Err = fmt.Errorf("render: waiting for a tab: %w", err)
		return doc
	}
	defer func() { <-b.tabs }()
	in, err := b.openTab()
	if err != nil {
		// Not ErrRender: the node has no browser (it would not start, or
		// is shutting down); the page is not at fault and may render
		// later, or on another node.
		doc.Err = fmt.Errorf("render: %w", err)
		return doc
	}
	timeout := o.Render.Timeout
	if timeout <= 0 {
		timeout = defaultTimeout
	}
	// A browser context of its own (an incognito profile, disposed of with
	// the tab): no cookie, storage or cache of one render is seen by the
	// next, which may be another campaign's.
	tabCtx, tabCancel := chromedp.NewContext(in.ctx, chromedp.WithNewBrowserContext())
	p := &tab{b: b, in: in, url: url, o: o, doc: doc}
	var dom string
	hung, crashed := false, false
	err = func() error {
		rctx, cancel := context.WithCancelCause(tabCtx)
		defer cancel(nil)
		stopBridge := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
		defer stopBridge()
		rctx, cancelTimeout := context.WithTimeoutCause(rctx, timeout, errTimeout)
		defer cancelTimeout()
		p.cancel = cancel
		dom, err = p.run(tabCtx, rctx)
		if err == nil {
			return nil
		}
		switch cause := context.Cause(rctx); {
		case errors.Is(cause, errTimeout):
			hung = true
			return fmt.Errorf("%w: the page did not settle within %s (spec.render.timeout)", fetch.ErrRender, timeout)
		case errors.Is(cause, errCrashed):
			crashed = true
			if in.tookMemory() {
				return fmt.Errorf("%w: %w", fetch.ErrRender, errMemory(b.o.TabMemory))
			}
			return fmt.Errorf("%w: %w", fetch.ErrRender, errCrashed)
		case in.ctx.Err() != nil && b.isClosed():
			return fmt.Errorf("render: the browser was closed (the node is stopping): %w", err) // not ErrRender
		case in.ctx.Err() != nil:
			return fmt.Errorf("%w: the browser died: %w", fetch.ErrRender, err)
		case ctx.Err() != nil:
			return fmt.Errorf("render: %w", context.Cause(ctx)) // not ErrRender: retry later
		}
		return fmt.Errorf("%w: %w", fetch.ErrRender, err)
	}()
	b.closeTab(in, crashed, !p.closeTab(tabCtx, tabCancel, hung))
	if err != nil {
		b.o.Log.Info("render failed", "url", url, "err", err)
		doc.Err = err
		return doc
	}
	resp := doc
	resp.Body = []byte(dom)
	resp.Rendered = p.rendered()
	return resp
}

// isClosed says whether Close was called.
func (b *Browser) isClosed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed
}

// tab is one render under way.
type tab struct {
	b      *Browser
	in     *instance
	url    string
	o      fetch.Options
	doc    fetch.Response
	cancel context.CancelCauseFunc
	slots  chan struct{}
	shot   *fetch.Screenshot // the page's picture, when asked for

	mu        sync.Mutex
	fetched   map[string]*fetchOnce // by URL: what the render fetched, or is fetching
	docServed bool
	mainFrame cdp.FrameID
	resources []fetch.Resource
	refused   int
	inflight  int
	last      time.Time // when a request was last paused or answered
	done      bool      // the render is over: record nothing more
}

// run opens the tab, loads the page, waits as o.Render says and returns
// the DOM. rctx bounds it all; tabCtx is the tab's own context, which the
// tab's first command must run under.
func (p *tab) run(tabCtx, rctx context.Context) (string, error) {
	p.slots = make(chan struct{}, resourcesAtOnce)
	opened := make(chan error, 1)
	go func() { opened <- chromedp.Do(tabCtx) }()
	select {
	case err := <-opened:
		if err != nil {
			return "", fmt.Errorf("open a tab: %w", err)
		}
	case <-rctx.Done():
		return "", context.Cause(rctx)
	}
	if err := chromedp.Listen(rctx, p.event(rctx)); err != nil {
		return "", err
	}
	// Service workers would answer requests from their caches, unseen.
	if _, err := chromedp.Call(rctx, network.SetBypassServiceWorker, network.SetBypassServiceWorkerParams{Bypass: true}); err != nil {
		return "", err
	}
	// Websockets are not intercepted by the Fetch domain: block them.
	blocked := []*network.BlockPattern{{URLPattern: "ws://*:*/*", Block: true}, {URLPattern: "wss://*:*/*", Block: true}}
	if _, err := chromedp.Call(rctx, network.SetBlockedURLs, network.SetBlockedURLsParams{URLPatterns: blocked}); err != nil {
		return "", err
	}
	patterns := []*cdpfetch.RequestPattern{{URLPattern: "*", RequestStage: cdpfetch.RequestStageRequest}}
	if _, err := chromedp.Call(rctx, cdpfetch.Enable, cdpfetch.EnableParams{Patterns: patterns}); err != nil {
		return "", err
	}
	p.touch(0)
	if err := chromedp.Do(rctx, chromedp.Navigate(p.url)); err != nil {
		return "", fmt.Errorf("load: %w", err)
	}
	r := p.o.Render
	if r.NetworkIdle {
		if err := p.waitIdle(rctx, or(r.IdleCap, defaultIdleCap)); err != nil {
			return "", err
		}
	}
	if err := p.scroll(rctx); err != nil {
		return "", err
	}
	dom, err := chromedp.Run(rctx, chromedp.Evaluate[string](serializeDOM))
	if err != nil {
		return "", fmt.Errorf("read the DOM: %w", err)
	}
	if r.Screenshot {
		if p.shot, err = p.screenshot(rctx); err != nil {
			// The page is rendered: it goes without its picture.
			p.b.o.Log.Info("screenshot failed", "campaign", r.Group, "url", p.url, "err", err)
		}
	}
	return dom, nil
}

func or(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// serializeDOM is the document as its scripts left it, behind the
// doctype it has: none for a page in quirks mode, whose parse a standard
// doctype would change.
const serializeDOM = `(document.doctype ? new XMLSerializer().serializeToString(document.doctype) + "\n" : "") +
	(document.documentElement ? document.documentElement.outerHTML : "")`

// event handles the tab's events. It runs on the loop that reads the
// tab's messages, so it sends no command itself.
func (p *tab) event(rctx context.Context) func(any) {
	return func(ev any) {
		switch ev := ev.(type) {
		case *cdpfetch.EventRequestPaused:
			p.touch(+1)
			slot := p.reserve() // here, on the event loop: Resources keep the page's order
			go func() {
				defer p.touch(-1)
				p.answer(rctx, ev, slot)
			}()
		case *network.EventWebSocketCreated:
			p.mu.Lock()
			p.refused++
			p.mu.Unlock()
		case *inspector.EventTargetCrashed:
			p.cancel(errCrashed)
		}
	}
}

// touch counts a request paused (+1) or answered (-1), and marks now as
// the network's last activity.
func (p *tab) touch(delta int) {
	p.mu.Lock()
	p.inflight += delta
	p.last = time.Now()
	p.mu.Unlock()
}

// answer settles one paused request: the document from memory, anything
// else refused or fetched through the node's fetcher.
func (p *tab) answer(rctx context.Context, ev *cdpfetch.EventRequestPaused, slot int) {
	id := ev.RequestID
	fail := func(reason network.ErrorReason) {
		chromedp.Call(rctx, cdpfetch.FailRequest, cdpfetch.FailRequestParams{RequestID: id, ErrorReason: reason})
	}
	p.mu.Lock()
	first := !p.docServed && ev.ResourceType == network.ResourceTypeDocument
	if first {
		p.docServed, p.mainFrame = true, ev.FrameID
	}
	renavigation := !first && ev.ResourceType == network.ResourceTypeDocument && ev.FrameID == p.mainFrame
	p.mu.Unlock()
	if first {
		p.fulfill(rctx, id, p.doc.Status, p.doc.Header, p.doc.Body)
		return
	}
	u := ev.Request.URL
	if parsed, err := url.Parse(u); err == nil && parsed.Path == "/favicon.ico" {
		fail(network.ErrorReasonBlockedByClient) // asked for by the browser, not the page
		return
	}
	method := ev.Request.Method
	refuse := renavigation || // a script leaving the page: the render is of this one
		method != http.MethodGet && method != http.MethodHead
	if !refuse && p.o.Render.Check != nil && p.o.Render.Check(u) != nil {
		refuse = true
	}
	if refuse {
		p.mu.Lock()
		p.refused++
		p.mu.Unlock()
		fail(network.ErrorReasonBlockedByClient)
		return
	}
	if slot < 0 {
		fail(network.ErrorReasonAborted)
		return
	}
	r, first, ok := p.get(rctx, u)
	if !ok {
		return // the render is over
	}
	if first {
		p.record(slot, fetch.Resource{URL: u, Status: r.Status, ContentType: r.ContentType, Wire: r.Wire, Err: r.Err})
	}
	if r.Status == 0 {
		fail(network.ErrorReasonFailed)
		return
	}
	body := r.Body
	if method == http.MethodHead {
		body = nil
	}
	p.fulfill(rctx, id, r.Status, r.Header, body)
}

// fetchOnce is one URL's fetch in a render: done closes when r is in.
type fetchOnce struct {
	done chan struct{}
	r    fetch.Response
}

// get fetches u through the node's fetcher once per render: a page that
// asks again (a script fetching a URL twice, an image in two places) is
// answered from the first answer, as a browser's cache would, and the
// host gets one request. first says this call made the request; ok is
// false when the render ended first.
func (p *tab) get(rctx context.Context, u string) (r fetch.Response, first, ok bool) {
	p.mu.Lock()
	f, seen := p.fetched[u]
	if !seen {
		if p.fetched == nil {
			p.fetched = map[string]*fetchOnce{}
		}
		f = &fetchOnce{done: make(chan struct{})}
		p.fetched[u] = f
	}
	p.mu.Unlock()
	if seen {
		select {
		case <-f.done:
			return f.r, false, true
		case <-rctx.Done():
			return fetch.Response{}, false, false
		}
	}
	defer close(f.done)
	select {
	case p.slots <- struct{}{}:
		defer func() { <-p.slots }()
	case <-rctx.Done():
		f.r.Err = context.Cause(rctx)
		return f.r, true, false
	}
	f.r = p.b.o.Plain.Get(rctx, u, fetch.Options{
		UserAgent:      p.o.UserAgent,
		ConnectTimeout: p.o.ConnectTimeout,
		RequestTimeout: p.o.RequestTimeout,
		IdleTimeout:    p.o.IdleTimeout,
		MaxBodyBytes:   p.o.MaxBodyBytes,
		Capture:        p.o.Capture,
		KeepBody:       true,
		KeepAnyType:    true,
	})
	return f.r, true, true
}

// reserve takes the next place in Resources, in the order the page asked
// (a place left empty, for the document or a refusal, is dropped); -1
// once the render is over.
func (p *tab) reserve() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return -1
	}
	p.resources = append(p.resources, fetch.Resource{})
	return len(p.resources) - 1
}

func (p *tab) record(slot int, r fetch.Resource) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.done {
		p.resources[slot] = r
	}
}

// fulfill answers a paused request. The body is decoded already, so the
// headers that describe its coding and length on the wire go.
func (p *tab) fulfill(rctx context.Context, id cdpfetch.RequestID, status int, h http.Header, body []byte) {
	var headers []*cdpfetch.HeaderEntry
	for name, values := range h {
		switch http.CanonicalHeaderKey(name) {
		case "Content-Encoding", "Content-Length", "Transfer-Encoding":
			continue
		}
		for _, v := range values {
			headers = append(headers, &cdpfetch.HeaderEntry{Name: name, Value: v})
		}
	}
	chromedp.Call(rctx, cdpfetch.FulfillRequest, cdpfetch.FulfillRequestParams{
		RequestID: id, ResponseCode: int64(status), ResponseHeaders: headers, Body: body,
	})
}

// waitIdle waits until no request has been in flight for quietFor, at most
// limit (not an error: a page that polls never goes quiet).
func (p *tab) waitIdle(rctx context.Context, limit time.Duration) error {
	began := time.Now()
	deadline := began.Add(limit)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		p.mu.Lock()
		// Quiet counts from the wait's start too: what was just done (a
		// scroll) may be about to ask for more.
		idle := p.inflight == 0 && time.Since(p.last) >= quietFor && time.Since(began) >= quietFor
		p.mu.Unlock()
		if idle || time.Now().After(deadline) {
			return nil
		}
		select {
		case <-tick.C:
		case <-rctx.Done():
			return context.Cause(rctx)
		}
	}
}

// scroll scrolls a screen at a time, as o.Render.ScrollSteps says, until
// the page stops growing and its bottom is in view.
func (p *tab) scroll(rctx context.Context) error {
	type extent struct {
		Height float64 `json:"h"`
		Bottom float64 `json:"b"`
	}
	const measure = `({h: document.documentElement.scrollHeight, b: window.scrollY + window.innerHeight})`
	// A screen down, then two frames: intersection observers (lazy
	// images, infinite lists) run in a frame's rendering step, and a
	// headless tab draws a frame only when something asks for one.
	const scrollStep = `new Promise(done => {
		window.scrollBy(0, window.innerHeight);
		requestAnimationFrame(() => requestAnimationFrame(() => done(true)));
		setTimeout(() => done(false), 1000);
	})`
	r := p.o.Render
	if r.ScrollSteps <= 0 {
		return nil
	}
	before, err := chromedp.Run(rctx, chromedp.Evaluate[extent](measure))
	if err != nil {
		return fmt.Errorf("scroll: %w", err)
	}
	if before.Bottom >= before.Height-1 {
		return nil // it fits the screen: there is nowhere to scroll to
	}
	for range r.ScrollSteps {
		if _, err := chromedp.Run(rctx, chromedp.Evaluate[bool](scrollStep, chromedp.EvalAwaitPromise)); err != nil {
			return fmt.Errorf("scroll: %w", err)
		}
		if err := p.waitIdle(rctx, or(r.ScrollWait, defaultScrollWait)); err != nil {
			return err
		}
		now, err := chromedp.Run(rctx, chromedp.Evaluate[extent](measure))
		if err != nil {
			return fmt.Errorf("scroll: %w", err)
		}
		if now.Height <= before.Height && now.Bottom >= now.Height-1 {
			return nil
		}
		before = now
	}
	return nil
}

// rendered ends the recording and returns what the page asked for.
func (p *tab) rendered() *fetch.Rendered {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done = true
	var kept []fetch.Resource
	for _, r := range p.resources {
		if r.URL != "" { // a request still under way when the render ended
			kept = append(kept, r)
		}
	}
	return &fetch.Rendered{Original: p.doc.Body, Resources: kept, Refused: p.refused, Screenshot: p.shot}
}

// closeTab closes the tab and says whether it went: a renderer stuck in
// a script can keep it listed (or the close itself can hang), and then
// only killing the browser frees it.
func (p *tab) closeTab(tabCtx context.Context, tabCancel context.CancelFunc, hung bool) bool {
	var id target.ID
	if c := chromedp.FromContext(tabCtx); c != nil && c.Target != nil {
		id = c.Target.TargetID
	}
	closed := make(chan struct{})
	go func() { tabCancel(); close(closed) }()
	deadline := time.After(closeWait)
	select {
	case <-closed:
	case <-deadline:
		return false
	}
	if !hung || id == "" {
		return true
	}
	// Closing a hung tab answers before the tab is gone: look for it.
	for {
		if !p.listed(id) {
			return true
		}
		select {
		case <-deadline:
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// listed says whether the browser still lists the target id.
func (p *tab) listed(id target.ID) bool {
	if p.in.ctx.Err() != nil {
		return false // the browser is gone, and the tab with it
	}
	ctx, cancel := context.WithTimeout(p.in.ctx, time.Second)
	defer cancel()
	targets, err := chromedp.Targets(ctx)
	if err != nil {
		return true
	}
	for _, t := range targets {
		if t.TargetID == id && !strings.EqualFold(t.Type, "browser") {
			return true
		}
	}
	return false
}
