// Package render fetches pages the way a browser shows them: it loads a
// page in headless Chromium (driven over the DevTools protocol by
// chromedp), lets its scripts run, and returns the DOM they leave.
//
// Nothing the page asks for reaches the network from Chromium. Every
// request is intercepted (the Fetch domain, at the request stage) and
// either refused or fetched by the node's own fetch.Fetcher and fulfilled
// from its answer, so the SSRF guard, the body caps, the wire capture and
// the user agent apply to a page's scripts, images and XHRs as to a plain
// GET. The document itself is fetched once, plainly, before the render,
// and served to Chromium from memory: a render makes no second request
// for it. Some connections are no requests and are never intercepted: a
// <link rel=preconnect> opens a socket with nothing sent (the tests saw
// one reach a loopback listener the guard forbids). So, as a second wall,
// Chromium's own resolver resolves nothing, IP literals included
// (--host-resolver-rules=MAP * ~NOTFOUND): whatever is not intercepted
// connects nowhere. WebRTC is the exception the resolver does not cover:
// its ICE agent sends STUN over UDP to IP literals itself (a test saw a
// binding request reach a forbidden loopback port), so it may use no UDP
// but through a proxy, and there is none
// (--webrtc-ip-handling-policy=disable_non_proxied_udp); its TCP (TURN)
// resolves through the walled resolver.
//
// A Browser keeps one Chromium with up to Options.Tabs pages open,
// started on the first render and restarted after RecycleAfter pages,
// after a crash, or when a page's tab cannot be closed (a script that
// never yields).
package render

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/spiderpool/spiderpool/fetch"
)

// Options configure a Browser.
type Options struct {
	// Path is the Chromium binary (see Find).
	Path string
	// Plain is the node's guarded fetcher: every request a page makes,
	// its document first, goes through it.
	Plain *fetch.Fetcher
	// Tabs is how many pages are rendered at once (default 2); Get waits
	// for a free tab as long as its context allows.
	Tabs int
	// RecycleAfter restarts Chromium after this many pages (default 100),
	// once none of its tabs is open, so that leaks in a long-lived
	// browser do not pile up.
	RecycleAfter int
	// TabMemory caps a page's renderer (the process that runs its scripts
	// and holds its DOM), in bytes of resident memory (default 1 GiB): a
	// page that holds more fails (see memory.go). It is also the
	// JavaScript heap's cap.
	TabMemory int64
	Log       *slog.Logger
}

// Browser renders pages in Chromium. Its methods are safe for concurrent
// use.
type Browser struct {
	o    Options
	tabs chan struct{} // a slot per tab that may be open

	mu     sync.Mutex
	groups map[string]chan struct{} // a slot per tab a group may have open (fetch.Render.Tabs)
	cur    *instance                // where new tabs open; nil until needed
	live   map[*instance]struct{}   // every Chromium not yet stopped
	closed bool
}

// New checks o and returns a Browser; Chromium starts on the first
// render.
func New(o Options) (*Browser, error) {
	if o.Plain == nil {
		return nil, errors.New("render: Options.Plain is nil: the browser fetches through the node's fetcher")
	}
	st, err := os.Stat(o.Path)
	if err != nil {
		return nil, fmt.Errorf("render: chromium %q: %w", o.Path, err)
	}
	if st.IsDir() || st.Mode().Perm()&0o111 == 0 {
		return nil, fmt.Errorf("render: chromium %q is not an executable file", o.Path)
	}
	if o.Tabs <= 0 {
		o.Tabs = 2
	}
	if o.RecycleAfter <= 0 {
		o.RecycleAfter = 100
	}
	if o.TabMemory <= 0 {
		o.TabMemory = defaultTabMemory
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return &Browser{o: o, tabs: make(chan struct{}, o.Tabs), live: map[*instance]struct{}{}, groups: map[string]chan struct{}{}}, nil
}

// group returns the slots of group g, n of them. When n changed (the
// campaign's spec did), the group gets new slots; renders holding old
// ones give them back where they took them.
func (b *Browser) group(g string, n int) chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	ch, ok := b.groups[g]
	if !ok || cap(ch) != n {
		ch = make(chan struct{}, n)
		b.groups[g] = ch
	}
	return ch
}

// acquire takes one of slots, waiting as long as ctx allows.
func acquire(ctx context.Context, slots chan struct{}) error {
	select {
	case slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Find returns the path of a Chromium on PATH.
func Find() (string, error) {
	names := []string{"chromium", "chromium-browser", "google-chrome"}
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("render: none of %v is on PATH", names)
}

// Close kills Chromium and waits for it and its helpers to exit. Renders
// under way fail; later ones fail at once. Close is idempotent.
func (b *Browser) Close() error {
	b.mu.Lock()
	b.closed = true
	b.cur = nil
	var all []*instance
	for in := range b.live {
		all = append(all, in)
	}
	b.mu.Unlock()
	var errs []error
	for _, in := range all {
		errs = append(errs, b.stop(in))
	}
	return errors.Join(errs...)
}

// instance is one Chromium process.
type instance struct {
	dir         string          // its own --user-data-dir, removed when it stops
	ctx         context.Context // its chromedp browser context: tabs open under it
	cancel      context.CancelFunc
	allocCancel context.CancelFunc
	pages       int  // tabs ever opened in it
	open        int  // tabs open now
	retired     bool // no new tabs: stop it when the last one closes
	// memoryKills counts its renderers killed for their memory whose
	// tabs have not yet said so (tookMemory).
	memoryKills atomic.Int64
	stopOnce    sync.Once
	stopErr     error
}

// openTab returns the instance a new tab should open in, starting one
// when there is none (or the current one died or served its pages), and
// counts the tab as open in it.
func (b *Browser) openTab() (*instance, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, errors.New("the browser is closed")
	}
	if in := b.cur; in != nil && (in.ctx.Err() != nil || in.pages >= b.o.RecycleAfter) {
		b.retireLocked(in)
		if in.open == 0 {
			go b.stop(in) // stop takes b.mu
		}
	}
	if b.cur == nil {
		in, err := b.start()
		if err != nil {
			return nil, err
		}
		b.cur = in
		b.live[in] = struct{}{}
	}
	b.cur.pages++
	b.cur.open++
	return b.cur, nil
}

// closeTab counts a tab of in as closed. retire opens no more tabs in in
// (it is stopped when its last tab closes): after a crash, whose cause (a
// renderer out of memory, a bad GPU path) may linger. kill stops in at
// once (its other tabs fail), for a tab that would not close.
func (b *Browser) closeTab(in *instance, retire, kill bool) {
	b.mu.Lock()
	in.open--
	if retire || kill || in.ctx.Err() != nil || in.pages >= b.o.RecycleAfter {
		b.retireLocked(in)
	}
	stop := kill || in.retired && in.open == 0
	b.mu.Unlock()
	if stop {
		b.stop(in)
	}
}

func (b *Browser) retireLocked(in *instance) {
	in.retired = true
	if b.cur == in {
		b.cur = nil
	}
}

// startTimeout bounds Chromium's start, first tab included.
const startTimeout = 30 * time.Second

// start launches a Chromium.
func (b *Browser) start() (*instance, error) {
	dir, err := os.MkdirTemp("", "spiderpool-render-")
	if err != nil {
		return nil, fmt.Errorf("start chromium: %w", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(b.o.Path),
		chromedp.UserDataDir(dir),
		chromedp.Flag("headless", "new"),
		chromedp.NoSandbox, // CI and containers run as root, where the sandbox cannot start
		chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("mute-audio", true),
		chromedp.Flag("dns-prefetch-disable", true),
		// The second wall (see the package doc): no host resolves, so
		// nothing but the intercepted requests, which are fulfilled
		// without a network, goes anywhere; preconnects go nowhere.
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND"),
		// WebRTC's UDP bypasses the resolver (see the package doc).
		chromedp.Flag("webrtc-ip-handling-policy", "disable_non_proxied_udp"),
		chromedp.Flag("js-flags", fmt.Sprintf("--max-old-space-size=%d", b.o.TabMemory>>20)),
		// A cross-site frame is a process and a target of its own under
		// site isolation, whose requests the tab's interception does not
		// see: they met the resolver wall and the frame rendered without
		// them. Frames stay in their page's process. Isolation guards a
		// user's data in one site from another's scripts; a render has
		// none (a fresh profile, public pages fetched without cookies).
		chromedp.Flag("disable-site-isolation-trials", true),
		chromedp.Flag("disable-features", "Translate,BlinkGenPropertyTrees,IsolateOrigins,site-per-process"),
		chromedp.WindowSize(1280, 900),
		chromedp.ModifyCmdFunc(dieWithUs),
	)
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, bcancel := chromedp.NewContext(actx)
	in := &instance{dir: dir, ctx: bctx, cancel: bcancel, allocCancel: acancel}
	started := make(chan error, 1)
	go func() { started <- chromedp.Do(bctx) }()
	select {
	case err = <-started:
	case <-time.After(startTimeout):
		err = fmt.Errorf("not ready within %s", startTimeout)
	}
	if err != nil {
		// Not stop: the caller holds b.mu, and in was never live.
		in.kill()
		return nil, fmt.Errorf("start chromium %s: %w", b.o.Path, err)
	}
	b.o.Log.Info("chromium started", "path", b.o.Path, "user_data_dir", dir)
	go b.watchMemory(in)
	return in, nil
}

// stop kills in's Chromium (see kill) and forgets it.
func (b *Browser) stop(in *instance) error {
	in.stopOnce.Do(func() {
		in.stopErr = in.kill()
		b.mu.Lock()
		delete(b.live, in)
		b.retireLocked(in)
		pages := in.pages
		b.mu.Unlock()
		b.o.Log.Info("chromium stopped", "user_data_dir", in.dir, "pages", pages)
	})
	return in.stopErr
}

// kill kills in's Chromium, waits for it, kills its helpers and removes
// its profile. Killing, not a graceful close: nothing in the profile is
// worth keeping, and a hung browser would not close. It takes no lock.
func (in *instance) kill() error {
	in.cancel() // kills the process (it runs under this context) and waits for it
	in.allocCancel()
	deadline := time.Now().Add(5 * time.Second)
	for quiet := 0; quiet < 3 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if killLeftovers(in.dir) == 0 {
			quiet++
		} else {
			quiet = 0
		}
	}
	return os.RemoveAll(in.dir)
}
