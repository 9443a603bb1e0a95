package fetch

// Media types of a Screenshot's pictures.
const (
	ScreenshotViewType      = "image/png"
	ScreenshotThumbnailType = "image/jpeg"
)

// Screenshot is a rendered page's picture (Render.Screenshot): the
// browser's viewport once the page settled, scrolled back to the top of
// the page after any autoscroll, so it shows what a visitor sees first
// with the lazy content loaded.
type Screenshot struct {
	// View is the viewport at its size, in PNG (ScreenshotViewType).
	View []byte
	// Thumbnail is the same view at half its width and height, in JPEG
	// (ScreenshotThumbnailType): what a replay's list of pages shows.
	Thumbnail []byte
}
