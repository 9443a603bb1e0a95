package crawler

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"golang.org/x/sync/errgroup"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/retry"
	"github.com/spiderpool/spiderpool/store"
)

// Puller feeds a process's crawl engines (one per node identity, see
// worker --replicas) from Postgres: it takes the batches pool runs route
// to its nodes (node_batches), hands each to its node's engine, reports
// finished ones back in bulk, and stops the engines' work for campaigns
// that are no longer running. One Puller per process, however many node
// identities it runs, so a process costs Postgres the same few statements
// a second with one identity or a thousand.
type Puller struct {
	st      *store.Store
	log     *slog.Logger
	engines map[string]*Fetch // by node ID
	nodes   []store.NodeHolder

	tracer trace.Tracer

	mu    sync.Mutex
	done  []store.DoneBatch
	spans map[int64]trace.Span // of batches running, by batch

	stop    context.CancelFunc
	stopped chan struct{}
	flushed chan struct{}
}

// Pull timing.
const (
	// pullBusy is how soon a process looks again after finding batches,
	// and pullIdle how long it waits after finding none (pullIdleLong
	// once it found none for pullIdleAfter): an idle pool of a thousand
	// processes costs Postgres a thousand cheap index probes a second.
	pullBusy      = 25 * time.Millisecond
	pullIdle      = 400 * time.Millisecond
	pullIdleLong  = time.Second
	pullIdleAfter = time.Minute
	// pullBatches bounds the batches one look takes, and claimers how many
	// of them are claimed at once.
	pullBatches = 64
	claimers    = 8
	// reportEvery is how often finished batches are reported, in one
	// transaction for all of them; stoppedEvery how often the campaigns
	// the engines hold are checked for having ended.
	reportEvery  = 100 * time.Millisecond
	stoppedEvery = 3 * time.Second
)

// NewPuller returns the puller of engines, each given its node ID and
// holder token. Engines must be built with FetchOptions.Done set to the
// puller's Done. Each batch is a span of tracer (nil: none): a batch is
// no Temporal activity, so the SDK's interceptor does not trace it.
func NewPuller(st *store.Store, tracer trace.Tracer, log *slog.Logger) *Puller {
	if tracer == nil {
		tracer = noop.NewTracerProvider().Tracer("")
	}
	return &Puller{
		st: st, log: log, engines: map[string]*Fetch{}, tracer: tracer, spans: map[int64]trace.Span{},
		stopped: make(chan struct{}), flushed: make(chan struct{}),
	}
}

// Add makes engine the one that runs the batches of node, holding them
// under holder. Call before Start.
func (p *Puller) Add(node, holder string, engine *Fetch) {
	p.engines[node] = engine
	p.nodes = append(p.nodes, store.NodeHolder{Node: node, Holder: holder})
}

// Done takes a finished batch for the next report.
func (p *Puller) Done(d store.DoneBatch) {
	p.mu.Lock()
	p.done = append(p.done, d)
	span := p.spans[d.Batch]
	delete(p.spans, d.Batch)
	p.mu.Unlock()
	if span != nil {
		span.SetAttributes(attribute.Int("spiderpool.fetched", d.Result.Fetched),
			attribute.Int("spiderpool.failed", d.Result.Failed), attribute.Int("spiderpool.retried", d.Result.Retried))
		span.End()
	}
}

// Start runs the puller until Stop.
func (p *Puller) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	p.stop = cancel
	go func() { defer close(p.stopped); p.pull(ctx) }()
	go func() { defer close(p.flushed); p.report(ctx) }()
}

// Stop takes no more batches and hands back the batches queued for the
// process's nodes. Call it before the engines stop; Flush after.
func (p *Puller) Stop(ctx context.Context) {
	p.stop()
	<-p.stopped
	ids := make([]string, len(p.nodes))
	for i, n := range p.nodes {
		ids[i] = n.Node
	}
	if n, err := p.st.ReleaseQueuedBatches(context.WithoutCancel(ctx), ids); err != nil {
		p.log.Warn("hand back the batches queued for this process's nodes; their leases expire instead", "error", err)
	} else if n > 0 {
		p.log.Info("handed back queued batches", "urls", n)
	}
}

// Flush reports the batches the engines finished, once they have stopped,
// trying until ctx ends.
func (p *Puller) Flush(ctx context.Context) {
	<-p.flushed
	wait := retry.Backoff(100*time.Millisecond, 2*time.Second)
	for !p.flush(ctx) {
		if !retry.Sleep(ctx.Done(), wait) {
			p.log.Warn("gave up reporting finished batches; the campaigns count their pages from Postgres at the end")
			return
		}
	}
}

func (p *Puller) pull(ctx context.Context) {
	wait, idleSince := pullIdle, time.Now()
	lastCheck := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		took := p.takeOnce(ctx)
		switch {
		case took > 0:
			wait, idleSince = pullBusy, time.Now()
		case time.Since(idleSince) > pullIdleAfter:
			wait = pullIdleLong
		default:
			wait = pullIdle
		}
		if time.Since(lastCheck) >= stoppedEvery {
			lastCheck = time.Now()
			p.stopEnded(ctx)
		}
	}
}

// takeOnce takes what is queued for the process's nodes and hands each
// batch to its engine; it returns how many it took.
func (p *Puller) takeOnce(ctx context.Context) int {
	batches, err := p.st.TakeBatches(ctx, p.nodes, pullBatches)
	if err != nil {
		if ctx.Err() == nil {
			p.log.Warn("take batches", "error", err)
		}
		return 0
	}
	g := errgroup.Group{}
	g.SetLimit(claimers)
	for _, b := range batches {
		g.Go(func() error {
			p.run(ctx, b)
			return nil
		})
	}
	_ = g.Wait()
	return len(batches)
}

// run hands a taken batch to its engine, trying again while the claim
// fails (Postgres away): nobody else will take the batch meanwhile.
func (p *Puller) run(ctx context.Context, b campaign.FetchBatchRequest) {
	e := p.engines[b.Node]
	_, span := p.tracer.Start(ctx, "FetchBatch", trace.WithAttributes(
		attribute.String("spiderpool.campaign", b.CampaignID), attribute.String("spiderpool.node", b.Node),
		attribute.Int64("spiderpool.lease", b.LeaseID), attribute.Int("spiderpool.urls", len(b.IDs))))
	p.mu.Lock()
	p.spans[b.Batch] = span
	p.mu.Unlock()
	for wait := retry.Backoff(250*time.Millisecond, 8*time.Second); ; {
		err := e.Take(ctx, b)
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			p.mu.Lock()
			delete(p.spans, b.Batch)
			p.mu.Unlock()
			span.End()
			return // stopping: the batch goes with its holder (see Stop)
		}
		p.log.Warn("claim a taken batch, retrying", "campaign", b.CampaignID, "node", b.Node, "lease", b.LeaseID, "error", err)
		if !retry.Sleep(ctx.Done(), wait) {
			return
		}
	}
}

// stopEnded stops the engines' work for campaigns no longer running.
func (p *Puller) stopEnded(ctx context.Context) {
	var keys []int64
	for _, e := range p.engines {
		keys = append(keys, e.Campaigns()...)
	}
	if len(keys) == 0 {
		return
	}
	ended, err := p.st.StoppedCampaigns(ctx, keys)
	if err != nil {
		if ctx.Err() == nil {
			p.log.Warn("check campaigns for their end", "error", err)
		}
		return
	}
	for _, key := range ended {
		for _, e := range p.engines {
			e.StopCampaign(key)
		}
	}
}

// report sends finished batches to Postgres every reportEvery, all in one
// transaction, until ctx ends.
func (p *Puller) report(ctx context.Context) {
	tick := time.NewTicker(reportEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		p.flush(ctx)
	}
}

// flush reports what is finished; false if Postgres did not take it (it
// is kept for the next try).
func (p *Puller) flush(ctx context.Context) bool {
	p.mu.Lock()
	done := p.done
	p.done = nil
	p.mu.Unlock()
	if len(done) == 0 {
		return true
	}
	if err := p.st.FinishBatches(context.WithoutCancel(ctx), done); err != nil {
		p.log.Warn("report finished batches, retrying", "batches", len(done), "error", err)
		p.mu.Lock()
		p.done = append(done, p.done...)
		p.mu.Unlock()
		return false
	}
	return true
}
