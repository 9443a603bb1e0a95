package archive

import (
	"fmt"
	"slices"
	"time"

	"github.com/nlnwa/gowarc/v3"
)

// Resource is something the crawler made rather than fetched, such as a
// rendered page's screenshot: a resource record (WARC 1.1 §6.4), its
// block the bytes as they are, named by a URI of its own.
type Resource struct {
	// URI is its WARC-Target-URI: urn:view:PAGE for a page's screenshot,
	// as Browsertrix names them, so a replay finds it by the page's URL.
	URI         string
	Date        time.Time // WARC-Date: the page's, to sit at its timestamp
	ContentType string    // the block's media type, e.g. image/png
	Body        []byte
}

// WriteResources appends a campaign's resource records to its files, in
// order, never as revisits (a page's screenshot is its own). errs has an
// entry per resource: nil when written.
func (w *Writer) WriteResources(c Campaign, rs []Resource) []error {
	errs := make([]error, len(rs))
	recs := make([]gowarc.WarcRecord, len(rs))
	gowarcMu.Lock()
	for i, r := range rs {
		recs[i], errs[i] = resourceRecord(r)
	}
	gowarcMu.Unlock()
	files, err := w.filesOf(c)
	for i, rec := range recs {
		if rec == nil {
			continue
		}
		if err != nil {
			errs[i] = err
			rec.Close()
			continue
		}
		gowarcMu.Lock()
		errs[i] = writeRecords(files, rs[i].URI, rec)
		gowarcMu.Unlock()
	}
	return errs
}

func resourceRecord(r Resource) (gowarc.WarcRecord, error) {
	b := gowarc.NewRecordBuilder(gowarc.Resource, slices.Concat(recordOptions, []gowarc.WarcRecordOption{
		gowarc.WithSpecViolationPolicy(gowarc.ErrFail), gowarc.WithSyntaxErrorPolicy(gowarc.ErrFail)})...)
	b.AddWarcHeader(gowarc.WarcTargetURI, r.URI)
	b.AddWarcHeaderTime(gowarc.WarcDate, r.Date.UTC().Truncate(time.Millisecond))
	b.AddWarcHeader(gowarc.ContentType, r.ContentType)
	if _, err := b.Write(r.Body); err != nil {
		return nil, fmt.Errorf("WARC resource record for %s: %w", r.URI, err)
	}
	rec, _, err := b.Build()
	if err != nil {
		return nil, fmt.Errorf("WARC resource record for %s: %w", r.URI, err)
	}
	return rec, nil
}
