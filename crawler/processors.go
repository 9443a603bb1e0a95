package crawler

import (
	"time"

	"github.com/spiderpool/spiderpool/crawl"
	"github.com/spiderpool/spiderpool/fetch"
	"github.com/spiderpool/spiderpool/store"
)

// forProcessors is what a fetched page keeps for the processors that want
// it, or nil when none does.
func (r *rules) forProcessors(c *store.ClaimedURL, self crawl.URL, resp *fetch.Response, at time.Time) *store.PageBody {
	var names, originals []string
	for i := range r.filters {
		if f := &r.filters[i]; f.Wants(self.String, resp.Status, resp.Header.Get("Content-Type")) {
			names = append(names, f.Name)
			if f.WantsOriginal() {
				originals = append(originals, f.Name)
			}
		}
	}
	if len(names) == 0 {
		return nil
	}
	// The body a processor gets is decoded: the headers that describe the
	// bytes on the wire (kept as received, for the archive) would lie.
	header := resp.Header.Clone()
	for _, h := range []string{"Content-Encoding", "Content-Length", "Transfer-Encoding"} {
		header.Del(h)
	}
	body := &store.PageBody{
		Processors: names, URL: c.URL, Depth: c.Depth, FinalURL: self.Linked(), Status: resp.Status, Header: header,
		ContentType: resp.Header.Get("Content-Type"), FetchedAt: at, Body: resp.Body,
	}
	if resp.Rendered != nil {
		body.Rendered, body.Original, body.OriginalFor = true, resp.Rendered.Original, originals
	}
	return body
}
