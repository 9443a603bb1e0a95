package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/config"
	"github.com/spiderpool/spiderpool/control"
	"github.com/spiderpool/spiderpool/devstack"
	"github.com/spiderpool/spiderpool/store"
)

// stack is spiderpool's full stack for the benchmark: a Postgres cluster,
// the Temporal dev server persisting to a file, and node processes started
// per run on a fresh database.
type stack struct {
	dir      string
	pg       *devstack.Postgres
	temporal *devstack.Temporal
	bin      string
	runs     int
	nodes    int
	conc     int
}

func startStack(bin string, nodes, conc int) (*stack, error) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "spiderpool-bench-")
	if err != nil {
		return nil, err
	}
	s := &stack{dir: dir, bin: bin, nodes: nodes, conc: conc}
	if s.pg, err = devstack.StartPostgres(ctx, devstack.PostgresOptions{}); err != nil {
		return nil, err
	}
	s.temporal, err = devstack.StartTemporal(ctx, devstack.TemporalOptions{UIPort: -1, DBFile: filepath.Join(dir, "temporal.db")})
	if err != nil {
		s.pg.Stop()
		return nil, err
	}
	return s, nil
}

func (s *stack) stop() {
	s.temporal.Stop()
	s.pg.Stop()
	os.RemoveAll(s.dir)
}

// spiderpoolResult is a crawl plus what only spiderpool reports.
type spiderpoolResult struct {
	crawlResult
	Runs             int   `json:"workflow_runs"`
	MaxHistoryEvents int64 `json:"max_history_events"`
}

// crawl runs one campaign over the web from seed on fresh nodes and
// database, timing it from the workflow's start to its result.
func (s *stack) crawl(seed string, maxDepth int) (spiderpoolResult, error) {
	ctx := context.Background()
	s.runs++
	db, err := s.pg.CreateDatabase(ctx, fmt.Sprintf("bench_%d", s.runs))
	if err != nil {
		return spiderpoolResult{}, err
	}
	cfg := config.Default()
	cfg.DatabaseURL, cfg.TemporalAddress = db, s.temporal.Address()
	cfg.ControlQueue = fmt.Sprintf("bench.%d", s.runs)
	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			p.Process.Signal(syscall.SIGTERM)
			p.Wait()
		}
	}()
	for i := range s.nodes {
		id := fmt.Sprintf("bench%d-n%d", s.runs, i+1)
		args := []string{"worker", "--node", id, "--weight", "1", "--fetch-concurrency", strconv.Itoa(s.conc),
			"--allow-private-networks", "--log-level", "warn"}
		if base := os.Getenv("BENCH_PPROF_BASE"); base != "" { // profile the nodes: 127.0.0.1:<base+i>
			port, _ := strconv.Atoi(base)
			args = append(args, "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", port+i))
		}
		p := exec.Command(s.bin, args...)
		p.Env = append(os.Environ(), config.EnvDatabaseURL+"="+db, config.EnvTemporalAddress+"="+cfg.TemporalAddress,
			config.EnvControlQueue+"="+cfg.ControlQueue)
		p.Stderr = os.Stderr
		p.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := p.Start(); err != nil {
			return spiderpoolResult{}, err
		}
		procs = append(procs, p)
	}
	st, err := store.Open(ctx, db, 2, 10*time.Second)
	if err != nil {
		return spiderpoolResult{}, err
	}
	defer st.Close()
	for deadline := time.Now().Add(time.Minute); ; {
		nodes, err := st.Nodes(ctx, nil)
		alive := 0
		for _, n := range nodes {
			if n.Alive {
				alive++
			}
		}
		if err == nil && alive == s.nodes {
			break
		}
		if time.Now().After(deadline) {
			return spiderpoolResult{}, fmt.Errorf("nodes did not register")
		}
		time.Sleep(100 * time.Millisecond)
	}
	c, err := control.Dial(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		return spiderpoolResult{}, err
	}
	defer c.Close()
	cs := &control.Campaigns{Client: c, Queue: cfg.ControlQueue}
	spec := campaign.Spec{
		Seeds:      []string{seed},
		Scope:      campaign.Scope{AllowedDomains: []string{"127.0.0.1"}},
		Limits:     campaign.Limits{MaxDepth: &maxDepth},
		Politeness: campaign.Politeness{MaxConcurrencyPerHost: 4},
	}
	id := fmt.Sprintf("bench-%d", s.runs)
	start := time.Now()
	run, err := cs.Start(ctx, id, spec)
	if err != nil {
		return spiderpoolResult{}, err
	}
	var sum campaign.Summary
	if err := run.Get(ctx, &sum); err != nil {
		return spiderpoolResult{}, err
	}
	elapsed := time.Since(start)
	var rss int64
	for _, p := range procs {
		rss += peakRSS(p.Process.Pid)
	}
	r := spiderpoolResult{
		crawlResult: crawlResult{Pages: sum.Fetched, Seconds: elapsed.Seconds(), PeakRSSMB: float64(rss) / (1 << 20)},
		Runs:        sum.Runs,
	}
	r.MaxHistoryEvents, err = maxHistory(ctx, c, id)
	return r, err
}

// maxHistory is the largest history of the campaign's runs.
func maxHistory(ctx context.Context, c client.Client, id string) (int64, error) {
	var most int64
	var token []byte
	for {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: fmt.Sprintf("WorkflowId = %q", id), NextPageToken: token,
		})
		if err != nil {
			return 0, err
		}
		for _, e := range resp.GetExecutions() {
			most = max(most, e.GetHistoryLength())
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return most, nil
		}
	}
}
