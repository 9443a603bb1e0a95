package crawler

import (
	"github.com/spiderpool/spiderpool/archive"
	"github.com/spiderpool/spiderpool/fetch"
)

// archiveScreenshot archives a rendered page's screenshot
// (spec.render.screenshot) beside the page's exchange ex, as Browsertrix
// does: resource records urn:view:URL (the viewport, PNG) and
// urn:thumbnail:URL (half size, JPEG), dated as the page, so a replay
// finds them by the page's URL at the page's timestamp (ReplayWeb.page
// shows the thumbnail in its list of pages). A screenshot that cannot be
// written is logged: the page is archived without it.
func (f *Fetch) archiveScreenshot(r *rules, ex *archive.Exchange, resp *fetch.Response) {
	if f.archive == nil || ex == nil || resp.Rendered == nil || resp.Rendered.Screenshot == nil {
		return
	}
	shot := resp.Rendered.Screenshot
	res := []archive.Resource{
		{URI: "urn:view:" + ex.URL, Date: ex.Date, ContentType: fetch.ScreenshotViewType, Body: shot.View},
		{URI: "urn:thumbnail:" + ex.URL, Date: ex.Date, ContentType: fetch.ScreenshotThumbnailType, Body: shot.Thumbnail},
	}
	c := archive.Campaign{Key: r.key, ID: r.id, Spec: r.spec}
	for i, err := range f.archive.WriteResources(c, res) {
		if err != nil {
			f.log.Warn("archive screenshot", "campaign", r.id, "url", ex.URL, "uri", res[i].URI, "error", err)
		}
	}
}
