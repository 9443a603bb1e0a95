package fetch

import (
	"errors"
	"time"
)

// Render asks for a page to be rendered in a browser (Options.Render).
// The plain Fetcher ignores it; a browser fetcher (package render) loads
// the page and everything it asks for, each request through a Fetcher, so
// the guard, the caps and the capture apply to them as to a plain GET.
type Render struct {
	// Auto renders the page only if its document, as served, is a script
	// shell (render.IsScriptShell); any other document comes back as a
	// plain fetch's would, Rendered nil, and no tab is opened for it.
	Auto bool
	// NetworkIdle waits, after the load event, until no request has been
	// in flight for 500ms, at most IdleCap; false waits for load alone.
	NetworkIdle bool
	IdleCap     time.Duration
	// Timeout caps the whole render, navigation to DOM taken. A page
	// that takes longer fails with an ErrRender.
	Timeout time.Duration
	// ScrollSteps scrolls a screen at a time, at most this many times,
	// waiting for the network to go idle (at most ScrollWait) after each
	// step, until the page stops growing.
	ScrollSteps int
	ScrollWait  time.Duration
	// Check, when set, vets each request the page makes beyond its own
	// document (robots.txt, scope); a non-nil error refuses it.
	Check func(url string) error
	// Screenshot takes a picture of the page once it settled
	// (Rendered.Screenshot).
	Screenshot bool
	// Group and Tabs, when Tabs > 0, cap the renders of one group (a
	// campaign) open at once on this browser, within its own cap on tabs.
	Group string
	Tabs  int
}

// Rendered is what a render adds to its Response: the document as the
// server sent it (Response.Body is the DOM as the scripts left it) and
// every other request the page made.
type Rendered struct {
	// Original is the document's body as served.
	Original []byte
	// Resources are the page's other requests, in the order they were
	// made, each fetched once through the node's Fetcher.
	Resources []Resource
	// Refused counts requests the render did not make: websockets,
	// methods other than GET and HEAD, or Check's refusals.
	Refused int
	// Screenshot is the page's picture when Render.Screenshot asked for
	// one; nil when not, or when taking it failed.
	Screenshot *Screenshot
}

// Resource is one request a rendered page made.
type Resource struct {
	URL         string
	Status      int
	ContentType string
	// Wire is the exchange as captured (Options.Capture), for the archive.
	Wire *Wire
	Err  error
}

// ErrRender is a render that failed after its document was served: the
// page did not settle within Render.Timeout (a script that never ends),
// or the browser's tab or process died. No retry fixes it.
var ErrRender = errors.New("render failed")
