// Package workers wires a node process with go.uber.org/fx: Postgres,
// Temporal, the control-queue worker (campaign workflows and control
// activities), the node-queue worker (fetch batches) and the node's
// registration and heartbeat. It holds no logic of its own.
package workers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.uber.org/dig"
	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"

	"github.com/spiderpool/spiderpool/activities"
	"github.com/spiderpool/spiderpool/archive"
	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/config"
	"github.com/spiderpool/spiderpool/control"
	"github.com/spiderpool/spiderpool/crawler"
	"github.com/spiderpool/spiderpool/fetch"
	"github.com/spiderpool/spiderpool/metrics"
	"github.com/spiderpool/spiderpool/render"
	"github.com/spiderpool/spiderpool/retry"
	"github.com/spiderpool/spiderpool/store"
	"github.com/spiderpool/spiderpool/workflows"
)

// Version is reported in the node registry.
var Version = "dev"

// Node builds the fx application of one node. Start it, and Stop it to
// hand its unfetched URLs back and deregister.
func Node(cfg config.Config, logger *slog.Logger) *fx.App {
	logger = logger.With("node", cfg.Node.ID)
	return fx.New(
		fx.Supply(cfg, logger),
		// fx's own log would repeat start-up errors with its wrapping; the
		// caller reports RootCause instead.
		fx.WithLogger(func() fxevent.Logger { return fxevent.NopLogger }),
		fx.StartTimeout(2*cfg.ConnectTimeout+30*time.Second),
		fx.StopTimeout(45*time.Second),
		fx.Provide(openStore, newMetrics, newTracing, dialTemporal, newFetcher, newBrowser, openArchive, listenHTTP),
		fx.Invoke(runNode, serveHTTP),
	)
}

// RootCause unwraps fx's wrapping, leaving the error that says what failed
// ("cannot reach Postgres at ...").
func RootCause(err error) error { return dig.RootCause(err) }

// UnreachableError is a node's failure to reach or use Postgres or
// Temporal as it starts (refused, silent, TLS, credentials, namespace), as
// opposed to any other failure of its start. Node's errors wrap it.
type UnreachableError struct{ Err error }

func (e *UnreachableError) Error() string { return e.Err.Error() }
func (e *UnreachableError) Unwrap() error { return e.Err }

func openStore(lc fx.Lifecycle, cfg config.Config, log *slog.Logger) (*store.Store, error) {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.ConnectTimeout+time.Minute)
	defer cancel()
	s, err := store.Connect(ctx, cfg)
	if err != nil {
		return nil, &UnreachableError{Err: err}
	}
	s.SetLogger(log) // its waits for a full server name the node
	migrate := func(ctx context.Context) error { _, err := s.Migrate(ctx, log); return err }
	// Pauses of 0.5s doubling to 2.5s: about 18.5s in all (22s with their
	// jitter), within fx.StartTimeout.
	if err := migrateRetrying(ctx, migrate, 500*time.Millisecond, log); err != nil {
		s.Close()
		return nil, err
	}
	lc.Append(fx.StopHook(s.Close))
	return s, nil
}

// migrateRetrying applies the schema's migrations, again when one loses
// a deadlock or a lock wait. In a rolling upgrade the first node of a new
// release migrates while nodes of the old one crawl: their transactions
// hold the tables a migration alters, and Postgres may pick the migration
// as a deadlock's victim. It rolls the migration back whole, so running it
// again is safe, where giving up would stop the new node from starting.
// The pauses start at first and grow to five times it.
func migrateRetrying(ctx context.Context, migrate func(context.Context) error, first time.Duration, log *slog.Logger) error {
	const attempts = 10
	wait := retry.Backoff(first, 5*first)
	for attempt := 1; ; attempt++ {
		err := migrate(ctx)
		var pe *pgconn.PgError
		if err == nil || !errors.As(err, &pe) || (pe.Code != deadlockDetected && pe.Code != lockNotAvailable) {
			return err
		}
		if attempt == attempts {
			return fmt.Errorf("%w (tried %d times: running nodes kept the tables locked)", err, attempts)
		}
		log.Warn("migration lost a lock to running nodes; trying again", "attempt", attempt, "error", err)
		if !retry.Sleep(ctx.Done(), wait) {
			return fmt.Errorf("%w (gave up trying again: %v)", err, ctx.Err())
		}
	}
}

// Postgres error codes a migration may meet beside running nodes.
const (
	deadlockDetected = "40P01"
	lockNotAvailable = "55P03"
)

func newMetrics(cfg config.Config) (*metrics.Registry, error) { return metrics.New(cfg.Node.ID) }

// openArchive opens the node's WARC writer when --warc-dir is set (nil
// otherwise); it is closed after the workers stop.
func openArchive(lc fx.Lifecycle, cfg config.Config, log *slog.Logger) (*archive.Writer, error) {
	if cfg.Node.WARCDir == "" {
		return nil, nil
	}
	w, err := archive.Open(cfg.Node.WARCDir, cfg.Node.ID, cfg.Node.WARCMaxSize)
	if err != nil {
		return nil, fmt.Errorf("--warc-dir: %w", err)
	}
	log.Info("writing WARC files", "dir", cfg.Node.WARCDir, "max_size", cfg.Node.WARCMaxSize)
	lc.Append(fx.StopHook(w.Close))
	return w, nil
}

func dialTemporal(lc fx.Lifecycle, cfg config.Config, log *slog.Logger, m *metrics.Registry, tr *tracing) (client.Client, error) {
	c, err := control.Dial(context.Background(), cfg, log, func(o *client.Options) {
		o.MetricsHandler = m.Temporal
		o.Interceptors = tr.interceptors
	})
	if err != nil {
		return nil, &UnreachableError{Err: err}
	}
	lc.Append(fx.StopHook(c.Close))
	return c, nil
}

// newFetcher is the node's fetcher, its guard refusing the node's own
// listener whatever the allow-list says: a crawl pointed at it would read
// the node's bodies, batches and profiles.
func newFetcher(cfg config.Config, hl httpListener) (*fetch.Fetcher, error) {
	guard, err := cfg.Node.Guard()
	if err != nil {
		return nil, err
	}
	guard.Own = append(guard.Own, hl.own()...)
	return fetch.New(max(4, cfg.Node.FetchConcurrency/8), guard), nil
}

// newBrowser is the node's browser (--browser), which renders the pages
// campaigns ask a browser for through the node's fetcher; nil without
// one. Its identities share it.
func newBrowser(lc fx.Lifecycle, cfg config.Config, f *fetch.Fetcher, log *slog.Logger) (*render.Browser, error) {
	path := cfg.Node.Browser
	if path == "" {
		return nil, nil
	}
	if path == "auto" {
		found, err := render.Find()
		if err != nil {
			return nil, fmt.Errorf("--browser auto: %w", err)
		}
		path = found
	}
	b, err := render.New(render.Options{Path: path, Plain: f, Tabs: cfg.Node.BrowserTabs,
		TabMemory: int64(cfg.Node.BrowserTabMemory) << 20, Log: log})
	if err != nil {
		return nil, fmt.Errorf("--browser %s: %w", path, err)
	}
	lc.Append(fx.StopHook(b.Close))
	return b, nil
}

// nodeRun is one node process at work: its control-queue worker, the
// crawl engine of each of its node identities with their registrations,
// and the puller and committer they share. runNode builds it; fx starts
// and stops it.
type nodeRun struct {
	cfg config.Config
	log *slog.Logger
	st  *store.Store
	tc  client.Client
	ids []string

	controlWorker worker.Worker
	regs          []store.Registration
	lives         []*crawler.Liveness // each identity's holder token, as its heartbeats keep it
	engines       []*crawler.Fetch
	puller        *crawler.Puller
	commits       *crawler.Commits

	// life ends the heartbeat, sweep and policy loops when the node stops.
	life     context.Context
	stopLife context.CancelFunc
	loops    sync.WaitGroup
}

func runNode(lc fx.Lifecycle, cfg config.Config, log *slog.Logger, st *store.Store, tc client.Client, f *fetch.Fetcher,
	b *render.Browser, m *metrics.Registry, arch *archive.Writer, hl httpListener, tr *tracing) {
	r := &nodeRun{cfg: cfg, log: log, st: st, tc: tc, ids: cfg.Node.IDs()}
	identity := fmt.Sprintf("%s@%s:%d", cfg.Node.ID, hostname(), os.Getpid())
	r.controlWorker = r.newControlWorker(identity)
	r.buildEngines(f, b, m, arch, hl, tr)
	r.life, r.stopLife = context.WithCancel(context.Background())
	lc.Append(fx.Hook{OnStart: r.start, OnStop: r.stop})
}

// newControlWorker is the worker of the control queue: campaign workflows
// and control activities.
func (r *nodeRun) newControlWorker(identity string) worker.Worker {
	w := worker.New(r.tc, r.cfg.ControlQueue, worker.Options{
		Identity:          identity,
		WorkerStopTimeout: 10 * time.Second,
		// Local activities (lease, ring history) are short Postgres calls.
		MaxConcurrentLocalActivityExecutionSize: 64,
	})
	workflows.Register(w)
	(&activities.Control{Store: r.st, Log: r.log, SearchAttributes: searchAttributes(r.tc, r.cfg.Namespace)}).Register(w)
	return w
}

// buildEngines gives each node identity its registration and crawl
// engine. Every identity takes its batches from Postgres through the
// process's one puller, and polls no task queue of its own, so a thousand
// of them cost Temporal nothing.
func (r *nodeRun) buildEngines(f *fetch.Fetcher, b *render.Browser, m *metrics.Registry, arch *archive.Writer, hl httpListener, tr *tracing) {
	n := r.cfg.Node
	caps := []string{campaign.CapPull}
	var pages crawler.PageFetcher // nil: the engines fetch pages with f
	if b != nil {
		caps, pages = append(caps, campaign.CapBrowser), b
	}
	r.puller = crawler.NewPuller(r.st, tr.tracer, r.log)
	r.commits = crawler.NewCommits(r.st, m.Crawl, r.log)
	r.regs = make([]store.Registration, len(r.ids))
	r.engines = make([]*crawler.Fetch, len(r.ids))
	r.lives = make([]*crawler.Liveness, len(r.ids))
	for i, id := range r.ids {
		r.regs[i] = store.Registration{
			ID: id, Weight: n.Weight, Version: Version,
			Incarnation: incarnation(), TTL: n.TTL, BodiesAddr: hl.bodiesAddr, MetricsAddr: hl.metricsAddr, Capabilities: caps,
		}
		holder := store.HolderToken(id, r.regs[i].Incarnation)
		r.lives[i] = &crawler.Liveness{}
		opts := crawler.FetchOptions{
			Concurrency: n.FetchConcurrency, Holder: holder, Live: r.lives[i], Metrics: m.Crawl, Archive: arch, Done: r.puller.Done,
			Commits: r.commits, Pages: pages,
		}
		r.engines[i] = crawler.NewFetch(id, r.st, f, opts, r.log)
		r.puller.Add(id, holder, r.engines[i])
	}
}

// start registers the node identities, starts their engines, the puller
// and the workers, then the heartbeat, sweep and policy loops.
func (r *nodeRun) start(ctx context.Context) error {
	for i, reg := range r.regs {
		sent := time.Now()
		if err := r.st.RegisterNode(ctx, reg); err != nil {
			return err
		}
		r.lives[i].Beat(sent, time.Now(), reg.TTL)
	}
	for _, e := range r.engines {
		e.Start()
	}
	r.puller.Start()
	if err := r.startWorkers(); err != nil {
		return err
	}
	n := r.cfg.Node
	r.loops.Add(3)
	go func() {
		defer r.loops.Done()
		heartbeat(r.life, r.st, r.tc, r.regs, r.lives, n.HeartbeatInterval, r.log)
	}()
	go func() { defer r.loops.Done(); sweepEnded(r.life, r.st, r.tc, r.ids, n.EndedSweep, r.log) }()
	go func() { defer r.loops.Done(); crawler.WatchPolicies(r.life, r.st, r.engines) }()
	r.log.Info("node started", "identities", len(r.ids), "weight", n.Weight,
		"control_queue", r.cfg.ControlQueue, "fetch_concurrency", n.FetchConcurrency, "temporal", r.cfg.TemporalAddress)
	return nil
}

// startWorkers starts the control worker.
func (r *nodeRun) startWorkers() error {
	if err := r.controlWorker.Start(); err != nil {
		return fmt.Errorf("start worker on %s: %w", r.cfg.ControlQueue, err)
	}
	return nil
}

// stop takes no new batches; then the engines hand back what they have
// not started and the puller reports their batches; then the control
// worker stops, the loops end and the identities deregister.
func (r *nodeRun) stop(ctx context.Context) error {
	r.puller.Stop(ctx)
	r.stopEngines(ctx)
	if err := r.commits.Close(ctx); err != nil {
		r.log.Warn("stopping the commits", "error", err)
	}
	r.puller.Flush(ctx)
	r.controlWorker.Stop()
	r.stopLife()
	r.loops.Wait()
	for _, reg := range r.regs {
		if err := r.st.DeregisterNode(context.WithoutCancel(ctx), reg.ID, reg.Incarnation); err != nil {
			r.log.Warn("deregister", "node", reg.ID, "error", err)
		}
	}
	r.log.Info("node stopped")
	return nil
}

// stopEngines stops every identity's engine at once and waits for all.
func (r *nodeRun) stopEngines(ctx context.Context) {
	var stopping sync.WaitGroup
	for _, e := range r.engines {
		stopping.Go(func() {
			if err := e.Stop(ctx); err != nil {
				r.log.Warn("stopping the crawl engine", "error", err)
			}
		})
	}
	stopping.Wait()
}

// searchAttributes lists the namespace's custom search attributes.
func searchAttributes(tc client.Client, namespace string) func(context.Context) ([]string, error) {
	return func(ctx context.Context) ([]string, error) {
		resp, err := tc.OperatorService().ListSearchAttributes(ctx,
			&operatorservice.ListSearchAttributesRequest{Namespace: namespace})
		if err != nil {
			return nil, fmt.Errorf("list search attributes of namespace %s: %w", namespace, err)
		}
		return slices.Collect(maps.Keys(resp.GetCustomAttributes())), nil
	}
}

// httpListener holds the node's listeners, each only when its flag is
// set: metrics (/metrics, /healthz), bodies (page bodies and batches for
// processors, behind the node secret) and pprof. The addresses are those
// others reach them at.
type httpListener struct {
	metrics, bodies, pprof  net.Listener
	metricsAddr, bodiesAddr string
	secret                  string
}

// own are the addresses the node listens on, which its fetches must never
// reach (fetch.Guard.Own).
func (hl httpListener) own() []netip.AddrPort {
	var out []netip.AddrPort
	for _, l := range hl.open() {
		out = append(out, l.Addr().(*net.TCPAddr).AddrPort())
	}
	return out
}

// open are the listeners the node opened.
func (hl httpListener) open() []net.Listener {
	var out []net.Listener
	for _, l := range []net.Listener{hl.metrics, hl.bodies, hl.pprof} {
		if l != nil {
			out = append(out, l)
		}
	}
	return out
}

func listenHTTP(cfg config.Config) (hl httpListener, err error) {
	n := cfg.Node
	defer func() {
		if err != nil {
			for _, l := range hl.open() {
				l.Close()
			}
		}
	}()
	if n.BodiesAddr != "" {
		if hl.secret, err = n.BodiesSecret(); err != nil {
			return hl, err
		}
		if hl.bodies, hl.bodiesAddr, err = listen(n.BodiesAddr, "--bodies-addr"); err != nil {
			return hl, err
		}
	}
	if n.MetricsAddr != "" {
		if hl.metrics, hl.metricsAddr, err = listen(n.MetricsAddr, "--metrics-addr"); err != nil {
			return hl, err
		}
	}
	if a := n.PprofAddr; a != "" {
		if host, port, err := net.SplitHostPort(a); err == nil && host == "" {
			a = net.JoinHostPort("127.0.0.1", port) // loopback unless a host is named
		}
		if hl.pprof, _, err = listen(a, "--pprof"); err != nil {
			return hl, err
		}
	}
	return hl, nil
}

// listen listens on addr and says where others reach it: by the
// machine's name when it listens on every interface.
func listen(addr, flag string) (net.Listener, string, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", flag, err)
	}
	a := l.Addr().(*net.TCPAddr)
	if a.IP.IsUnspecified() {
		return l, net.JoinHostPort(hostname(), fmt.Sprint(a.Port)), nil
	}
	return l, a.String(), nil
}

// serveHTTP serves the node's /metrics (crawl and Temporal SDK metrics,
// Prometheus text format) and /healthz on --metrics-addr; the page bodies
// and batches processors fetch by reference on --bodies-addr, to callers
// with the node secret; and /debug/pprof on --pprof. Each only when set.
func serveHTTP(lc fx.Lifecycle, hl httpListener, st *store.Store, log *slog.Logger, m *metrics.Registry) {
	if hl.metrics != nil {
		mux := http.NewServeMux()
		mux.Handle("/metrics", m.Handler())
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
		serve(lc, hl.metrics, mux, log, "/metrics")
	}
	if hl.bodies != nil {
		mux := http.NewServeMux()
		mux.Handle(activities.BodyPath, activities.BodyHandler(st))
		mux.Handle(activities.BatchPath, activities.BatchHandler(st))
		serve(lc, hl.bodies, activities.RequireSecret(hl.secret, mux), log, activities.BodyPath)
	}
	if hl.pprof != nil {
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		serve(lc, hl.pprof, mux, log, "/debug/pprof/")
	}
}

// serve runs an HTTP server on l for the node's life.
func serve(lc fx.Lifecycle, l net.Listener, h http.Handler, log *slog.Logger, path string) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
			go srv.Serve(l) //nolint:errcheck // ends with Shutdown
			log.Info("serving", "url", "http://"+l.Addr().String()+path)
			return nil
		},
		OnStop: srv.Shutdown,
	})
}

// heartbeat renews the registry rows and holder tokens of the process's
// node identities, in one statement for all of them. A node that has not
// reached Temporal for two TTLs stops counting as alive to campaigns (it
// cannot take batches; they move its hosts elsewhere), while its holder
// tokens live on as long as it reaches Postgres, so what it holds is
// finished, not fetched twice. A shorter outage of Temporal (a restart)
// changes nothing.
func heartbeat(ctx context.Context, st *store.Store, tc client.Client, regs []store.Registration, lives []*crawler.Liveness,
	every time.Duration, log *slog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	ids := make([]string, len(regs))
	incarnations := make([]string, len(regs))
	for i, r := range regs {
		ids[i], incarnations[i] = r.ID, r.Incarnation
	}
	ttl := regs[0].TTL
	var unreachableSince time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		hctx, cancel := context.WithTimeout(ctx, every)
		_, err := tc.CheckHealth(hctx, &client.CheckHealthRequest{})
		cancel()
		switch {
		case err == nil:
			unreachableSince = time.Time{}
		case unreachableSince.IsZero():
			unreachableSince = time.Now()
		}
		canWork := unreachableSince.IsZero() || time.Since(unreachableSince) < 2*ttl
		if !canWork && ctx.Err() == nil {
			log.Warn("Temporal unreachable; campaigns move this node's hosts elsewhere until it is back",
				"since", unreachableSince.Format(time.RFC3339), "error", err)
		}
		sent := time.Now()
		lost, err := st.HeartbeatNodes(ctx, ids, incarnations, canWork)
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warn("registry heartbeat failed", "error", err)
		case err == nil:
			beat(ids, lives, lost, sent, time.Now(), ttl)
			if len(lost) > 0 {
				log.Warn("registry heartbeat: another process registered under these node IDs", "nodes", lost)
			}
		}
		if late := time.Since(sent); late > every && ctx.Err() == nil {
			log.Warn("registry heartbeat was slow; past four fifths of the node TTL, the URLs this process claimed before are handed back unfetched",
				"took", late.Round(time.Millisecond), "ttl", ttl)
		}
	}
}

// beat records a heartbeat sent at sent on the holder tokens it kept
// alive: every identity's but the lost ones (another process took their
// IDs, and their tokens are dead for good).
func beat(ids []string, lives []*crawler.Liveness, lost []string, sent, done time.Time, ttl time.Duration) {
	for i, id := range ids {
		if !slices.Contains(lost, id) {
			lives[i].Beat(sent, done, ttl)
		}
	}
}

func incarnation() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "unknown"
	}
	return h
}
