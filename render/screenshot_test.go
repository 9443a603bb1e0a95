package render_test

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/fetch"
	"github.com/spiderpool/spiderpool/render"
)

// screenshotPage is red for its first 300px and blue below, taller than
// the viewport, and writes the viewport's size in device pixels into its
// DOM, for the test to compare with the picture's.
const screenshotPage = `<!doctype html><html><head><style>body { margin: 0 }</style></head><body>
<div style="height: 300px; background: rgb(255, 0, 0)"></div>
<div style="height: 3000px; background: rgb(0, 0, 255)"></div>
<p id="size"></p>
<script>document.getElementById("size").textContent =
  Math.round(innerWidth * devicePixelRatio) + "x" + Math.round(innerHeight * devicePixelRatio);</script>
</body></html>`

// aScreenshotIsThePageAtTheTopOfTheViewport: asked for, a render returns
// the viewport as a PNG of the viewport's size and a JPEG of half that,
// both showing the top of the page although the render scrolled to its
// bottom; not asked for, none.
func aScreenshotIsThePageAtTheTopOfTheViewport(t *testing.T, b *render.Browser) {
	site := serveOn127002(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, screenshotPage)
	}))
	opts := &fetch.Render{Timeout: 20 * time.Second, ScrollSteps: 5, ScrollWait: 50 * time.Millisecond, Screenshot: true}
	r := b.Get(context.Background(), site+"/", renderOptions(opts))
	if r.Err != nil {
		t.Fatalf("render: %v", r.Err)
	}
	m := regexp.MustCompile(`<p id="size">(\d+)x(\d+)</p>`).FindSubmatch(r.Body)
	if m == nil {
		t.Fatalf("the page did not say its viewport's size: %s", r.Body)
	}
	w, _ := strconv.Atoi(string(m[1]))
	h, _ := strconv.Atoi(string(m[2]))
	shot := r.Rendered.Screenshot
	if shot == nil {
		t.Fatal("no screenshot, though the render asked for one")
	}
	view, err := png.Decode(bytes.NewReader(shot.View))
	if err != nil {
		t.Fatalf("the view is no PNG: %v (%d bytes)", err, len(shot.View))
	}
	if got := view.Bounds().Size(); got != image.Pt(w, h) {
		t.Errorf("the view is %v, the viewport %dx%d", got, w, h)
	}
	thumb, err := jpeg.Decode(bytes.NewReader(shot.Thumbnail))
	if err != nil {
		t.Fatalf("the thumbnail is no JPEG: %v (%d bytes)", err, len(shot.Thumbnail))
	}
	// Half of an odd size rounds either way.
	if got := thumb.Bounds().Size(); abs(2*got.X-w) > 1 || abs(2*got.Y-h) > 1 {
		t.Errorf("the thumbnail is %v, want half the viewport's %dx%d", got, w, h)
	}
	// The red band is the page's top; below it, blue.
	for name, img := range map[string]image.Image{"view": view, "thumbnail": thumb} {
		top, below := img.At(5, 5), img.At(5, img.Bounds().Dy()-5)
		if !near(top, 255, 0, 0) || !near(below, 0, 0, 255) {
			t.Errorf("%s: %v at the top, %v at the bottom; want red (the page's top), then blue", name, top, below)
		}
	}

	opts.Screenshot = false
	r = b.Get(context.Background(), site+"/", renderOptions(opts))
	if r.Err != nil {
		t.Fatalf("render: %v", r.Err)
	}
	if r.Rendered.Screenshot != nil {
		t.Error("a screenshot no render asked for")
	}
}

func abs(n int) int { return max(n, -n) }

// near says whether c is within a JPEG's error of r, g, b.
func near(c color.Color, r, g, b uint8) bool {
	cr, cg, cb, _ := c.RGBA()
	d := func(x uint32, y uint8) bool { return max(int(x>>8), int(y))-min(int(x>>8), int(y)) < 40 }
	return d(cr, r) && d(cg, g) && d(cb, b)
}
