package render

import (
	"context"
	"fmt"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/spiderpool/spiderpool/fetch"
)

// thumbnailQuality is the JPEG quality of a screenshot's thumbnail: a
// picture in a list of pages, where artefacts do not show.
const thumbnailQuality = 80

// screenshot takes the page's picture (fetch.Screenshot): the viewport
// after the page settled, scrolled back to the top, in PNG, and the same
// at half size in JPEG. Browsertrix (webrecorder/browsertrix-crawler,
// src/util/screenshots.ts) takes its "view" in PNG and its "thumbnail" in
// JPEG likewise; ReplayWeb.page shows the thumbnail beside the page in
// its list of pages.
func (p *tab) screenshot(rctx context.Context) (*fetch.Screenshot, error) {
	type viewport struct {
		X float64 `json:"x"`
		Y float64 `json:"y"`
		W float64 `json:"w"`
		H float64 `json:"h"`
	}
	// Back to the top at once (a page's smooth scrolling would still be
	// under way), then two frames, so what is captured is drawn.
	const toTop = `new Promise(done => {
		window.scrollTo({top: 0, left: 0, behavior: "instant"});
		requestAnimationFrame(() => requestAnimationFrame(() => done({x: scrollX, y: scrollY, w: innerWidth, h: innerHeight})));
		setTimeout(() => done({x: scrollX, y: scrollY, w: innerWidth, h: innerHeight}), 1000);
	})`
	vp, err := chromedp.Run(rctx, chromedp.Evaluate[viewport](toTop, chromedp.EvalAwaitPromise))
	if err != nil {
		return nil, fmt.Errorf("screenshot: scroll to the top: %w", err)
	}
	view, err := chromedp.Call(rctx, page.CaptureScreenshot, page.CaptureScreenshotParams{Format: page.CaptureScreenshotFormatPng})
	if err != nil {
		return nil, fmt.Errorf("screenshot: %w", err)
	}
	// The clip is in the document's CSS pixels: the viewport where it is.
	quality := int64(thumbnailQuality)
	thumb, err := chromedp.Call(rctx, page.CaptureScreenshot, page.CaptureScreenshotParams{
		Format: page.CaptureScreenshotFormatJpeg, Quality: &quality,
		Clip: &page.Viewport{X: vp.X, Y: vp.Y, Width: vp.W, Height: vp.H, Scale: 0.5},
	})
	if err != nil {
		return nil, fmt.Errorf("screenshot: thumbnail: %w", err)
	}
	return &fetch.Screenshot{View: view.Data, Thumbnail: thumb.Data}, nil
}
