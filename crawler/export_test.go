package crawler

import (
	"context"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/campaign"
)

// Accept is Take with its answer: pending is false when the batch ended at
// once, with res; otherwise its end goes to FetchOptions.Done.
func (f *Fetch) Accept(ctx context.Context, req campaign.FetchBatchRequest) (res campaign.BatchResult, pending bool, err error) {
	return f.accept(ctx, req)
}

// Stopping says whether Stop has begun: batches accepted from then on are
// handed back at once.
func (f *Fetch) Stopping() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stopping
}

// SetFlushAfter makes pending settlements wait d before their commit for
// the rest of the test.
func SetFlushAfter(t *testing.T, d time.Duration) {
	old := flushAfter
	flushAfter = d
	t.Cleanup(func() { flushAfter = old })
}
