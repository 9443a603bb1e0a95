package harness

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/sdk/client"
	"go.uber.org/fx"

	"github.com/spiderpool/spiderpool/config"
	"github.com/spiderpool/spiderpool/control"
	"github.com/spiderpool/spiderpool/devstack"
	"github.com/spiderpool/spiderpool/store"
	"github.com/spiderpool/spiderpool/workers"
)

var (
	temporalOnce sync.Once
	temporalSrv  *devstack.Temporal
	temporalErr  error
	stackSeq     atomic.Int64
)

// Temporal returns the dev server shared by the test binary, starting it
// on first use (with a persistent db file, so tests may restart it).
func Temporal(t testing.TB) *devstack.Temporal {
	t.Helper()
	temporalOnce.Do(func() {
		dir, err := os.MkdirTemp("", "spiderpool-temporal-")
		if err != nil {
			temporalErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		temporalSrv, temporalErr = devstack.StartTemporal(ctx, devstack.TemporalOptions{
			UIPort: -1, DBFile: dir + "/temporal.db", Output: logSink(),
		})
		if temporalErr == nil {
			atExit(func() { _ = temporalSrv.Stop(); _ = os.RemoveAll(dir) })
		}
	})
	if temporalErr != nil {
		t.Fatalf("temporal: %v", temporalErr)
	}
	return temporalSrv
}

// logSink shows server logs when SPIDERPOOL_TEST_LOGS is set.
func logSink() io.Writer {
	if os.Getenv("SPIDERPOOL_TEST_LOGS") != "" {
		return os.Stderr
	}
	return io.Discard
}

// Stack is one test's spiderpool: its own database and control queue on
// the shared Postgres and Temporal, and nodes run in-process through the
// same fx wiring as `spiderpool worker`.
type Stack struct {
	t         testing.TB
	Name      string // unique prefix of this stack's node IDs and queue
	Config    config.Config
	Store     *store.Store
	Client    client.Client
	Campaigns *control.Campaigns
	Log       *slog.Logger

	mu    sync.Mutex
	nodes map[string]*fx.App
}

// NewStack gives the test a fresh database and control queue.
func NewStack(t testing.TB) *Stack {
	t.Helper()
	tmp := Temporal(t)
	name := fmt.Sprintf("s%d", stackSeq.Add(1))
	cfg := config.Default()
	cfg.DatabaseURL = NewDatabase(t)
	cfg.TemporalAddress = tmp.Address()
	cfg.ControlQueue = "spiderpool.control." + name + "." + sanitize(t.Name())
	cfg.From = config.Source{DatabaseURL: "test", TemporalAddress: "test"}
	level := slog.LevelWarn
	if os.Getenv("SPIDERPOOL_TEST_LOGS") != "" {
		level = slog.LevelInfo
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("test", t.Name())
	// The test's own queries run under a statement timeout, so one stuck
	// behind a lock fails the test instead of hanging it; the nodes use
	// cfg.DatabaseURL as it is.
	st, err := store.Open(context.Background(), WithParam(cfg.DatabaseURL, "statement_timeout", testStatementTimeout), 8, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	c, err := control.Dial(context.Background(), cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	s := &Stack{
		t: t, Name: name, Config: cfg, Store: st, Client: c, Log: logger,
		Campaigns: &control.Campaigns{Client: c, Queue: cfg.ControlQueue},
		nodes:     map[string]*fx.App{},
	}
	t.Cleanup(s.stopAll)
	return s
}

// NodeID turns a short name into this stack's node ID.
func (s *Stack) NodeID(short string) string { return s.Name + "-" + short }

// StartNode runs a node in-process and waits until it is registered.
func (s *Stack) StartNode(short string, weight float64) string {
	s.t.Helper()
	return s.StartNodeWith(short, weight, nil)
}

// StartNodeWith is StartNode with the node's configuration edited first.
func (s *Stack) StartNodeWith(short string, weight float64, edit func(*config.Config)) string {
	s.t.Helper()
	cfg := s.Config
	cfg.Node.ID = s.NodeID(short)
	cfg.Node.Weight = weight
	cfg.Node.HeartbeatInterval = time.Second
	cfg.Node.TTL = 4 * time.Second
	cfg.Node.DBConns = 8
	cfg.Node.AllowPrivateNetworks = true // the synthetic webs live on loopback
	if edit != nil {
		edit(&cfg)
	}
	if err := cfg.ValidateNode(); err != nil {
		s.t.Fatal(err)
	}
	app := workers.Node(cfg, s.Log)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := app.Start(ctx); err != nil {
		s.t.Fatalf("start node %s: %v", cfg.Node.ID, workers.RootCause(err))
	}
	s.mu.Lock()
	s.nodes[cfg.Node.ID] = app
	s.mu.Unlock()
	return cfg.Node.ID
}

// StopNode stops a node cleanly.
func (s *Stack) StopNode(id string) {
	s.mu.Lock()
	app := s.nodes[id]
	delete(s.nodes, id)
	s.mu.Unlock()
	if app != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = app.Stop(ctx)
	}
}

func (s *Stack) stopAll() {
	s.mu.Lock()
	ids := make([]string, 0, len(s.nodes))
	for id := range s.nodes {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() { defer wg.Done(); s.StopNode(id) }()
	}
	wg.Wait()
}

// Eventually polls cond until it holds or the deadline passes: waiting on
// an observable condition, never on a fixed sleep.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Strings runs a query of one text column against the stack's database
// and returns its values; any error fails the test.
func (s *Stack) Strings(query string, args ...any) []string {
	s.t.Helper()
	rows, err := s.Store.Pool().Query(context.Background(), query, args...)
	if err != nil {
		s.t.Fatalf("%s: %v", query, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		s.t.Fatalf("%s: %v", query, err)
	}
	return out
}
