package activities

import (
	"context"
	"time"

	"github.com/spiderpool/spiderpool/campaign"
)

// Accept is FetchBatch without an activity context: it claims and queues
// a batch whose completion the engine reports to its Temporal by token.
func (f *Fetch) Accept(ctx context.Context, req campaign.FetchBatchRequest, token []byte, workflowID string, heartbeat time.Duration) (campaign.BatchResult, bool, error) {
	return f.accept(ctx, req, token, workflowID, heartbeat)
}

// Stopping says whether Stop has begun: batches accepted from then on are
// handed back at once.
func (f *Fetch) Stopping() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stopping
}
