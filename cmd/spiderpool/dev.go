package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/spiderpool/spiderpool/config"
	"github.com/spiderpool/spiderpool/devstack"
	"github.com/spiderpool/spiderpool/store"
)

// DevState is what `spiderpool dev` writes to <state-dir>/dev.json once
// everything is up, for scripts (make demo) that drive the stack.
type DevState struct {
	// DatabaseURL is the URL nodes use: PgBouncer's when it fronts the
	// server, which is then at DirectDatabaseURL.
	DatabaseURL       string    `json:"database_url"`
	DirectDatabaseURL string    `json:"direct_database_url,omitempty"`
	TemporalAddress   string    `json:"temporal_address"`
	WebUI             string    `json:"web_ui,omitempty"`
	ControlQueue      string    `json:"control_queue"`
	Nodes             []DevNode `json:"nodes"`
}

// DevNode is one node process of the dev stack.
type DevNode struct {
	ID     string  `json:"id"`
	Weight float64 `json:"weight"`
	PID    int     `json:"pid"`
	Log    string  `json:"log"`
	// Metrics is the node's /metrics URL, if it serves one.
	Metrics string `json:"metrics,omitempty"`
	// Identities are the node IDs the process registers: ID itself, or
	// ID-1 to ID-<replicas> with --replicas.
	Identities []string `json:"identities"`
}

func (a *app) devCmd() *cobra.Command {
	var (
		nodes    int
		weights  string
		tport    int
		uiport   int
		pgport   int
		stateDir string
		mport    int
		warcDir  string
		bouncer  string
		bport    int
		replicas int
	)
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run the whole stack locally: Postgres, Temporal dev server with Web UI, and nodes",
		Long: `Run the whole stack on this machine until interrupted: a private throwaway
Postgres cluster (unless DATABASE_URL is set) with a stock server's 100
connections, PgBouncer in front of it when the nodes' pools need more
(--pgbouncer), the Temporal CLI's dev server with its Web UI (unless
TEMPORAL_ADDRESS is set), and node processes, each a 'spiderpool worker' you
can kill to watch its hosts move to other nodes.`,
		Example: `  spiderpool dev
  spiderpool dev --nodes 4 --weights 1,1,2,4     # 64 connections: through PgBouncer
  spiderpool dev --nodes 50                       # fifty nodes of weight 1
  spiderpool dev --nodes 10 --replicas 100        # a pool of 1,000 nodes in 10 processes
  DATABASE_URL=postgres://me@127.0.0.1/crawl spiderpool dev`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("weights") && nodes != 3 {
				weights = strings.TrimSuffix(strings.Repeat("1,", nodes), ",") // --nodes N alone: N nodes of weight 1
			}
			if replicas < 1 {
				return usageError(fmt.Errorf("--replicas must be >= 1, got %d", replicas))
			}
			ws, err := parseWeights(weights, nodes)
			if err != nil {
				return err
			}
			if !cmd.Flags().Changed("warc-dir") {
				warcDir = filepath.Join(stateDir, "warc")
			}
			if bouncer != "auto" && bouncer != "on" && bouncer != "off" {
				return usageError(fmt.Errorf("--pgbouncer is auto, on or off, not %q", bouncer))
			}
			ports := devPorts{temporal: tport, ui: uiport, pg: pgport, bouncer: bport, metrics: mport}
			return a.runDev(cmd.Context(), ws, replicas, ports, bouncer, stateDir, warcDir)
		},
	}
	cmd.Flags().IntVar(&nodes, "nodes", 3, "number of node processes")
	cmd.Flags().StringVar(&weights, "weights", "1,1,2", "comma-separated node weights (one per node; with --nodes alone, all 1)")
	cmd.Flags().IntVar(&replicas, "replicas", 1, "node identities in each node process (worker --replicas): --nodes 10 --replicas 100 is a pool of 1,000")
	cmd.Flags().IntVar(&tport, "temporal-port", 7233, "Temporal frontend port")
	cmd.Flags().IntVar(&uiport, "ui-port", 8233, "Temporal Web UI port")
	cmd.Flags().IntVar(&pgport, "pg-port", 55432, "port of the private Postgres cluster")
	cmd.Flags().StringVar(&stateDir, "state-dir", ".spiderpool", "where node logs and dev.json go")
	cmd.Flags().IntVar(&mport, "metrics-port", 9101, "first node's /metrics port on 127.0.0.1, the next node's one more; 0: no metrics")
	cmd.Flags().StringVar(&warcDir, "warc-dir", "", `where nodes write WARC files (default "<state-dir>/warc"; "" to write none)`)
	cmd.Flags().StringVar(&bouncer, "pgbouncer", "auto", "run PgBouncer (transaction mode) between the nodes and Postgres: on, off, "+
		"or auto: on when the nodes' connections (--nodes × their --db-conns) would exceed half the private cluster's "+
		"max_connections ("+strconv.Itoa(devMaxConnections)+"); never for a DATABASE_URL of yours unless on")
	cmd.Flags().IntVar(&bport, "pgbouncer-port", 56432, "port of PgBouncer, when it runs")
	return cmd
}

func parseWeights(s string, n int) ([]float64, error) {
	parts := strings.Split(s, ",")
	if len(parts) != n {
		return nil, fmt.Errorf("--weights has %d value(s) for --nodes %d", len(parts), n)
	}
	ws := make([]float64, n)
	for i, p := range parts {
		w, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || w < 0 {
			return nil, fmt.Errorf("--weights: %q is not a weight >= 0", p)
		}
		ws[i] = w
	}
	return ws, nil
}

func portFree(port int, what, flag string) error {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return fmt.Errorf("port %d for %s is in use (another `spiderpool dev`?): stop it or pass %s", port, what, flag)
	}
	return l.Close()
}

type devPorts struct{ temporal, ui, pg, bouncer, metrics int }

// devMaxConnections is the private cluster's max_connections: a stock
// server's, so the dev stack meets the limit a real one has.
const devMaxConnections = 100

// wantPgBouncer says whether the dev stack puts PgBouncer in front of
// Postgres: as the --pgbouncer flag says, and for auto when the nodes'
// pools could take more than half of the private cluster's connections
// (the rest is for `spiderpool campaign` commands, psql and Grafana). A
// server of the user's is theirs to size: auto leaves it alone.
func wantPgBouncer(mode string, nodes, dbConns int, ownServer bool) bool {
	switch mode {
	case "on":
		return true
	case "auto":
		return !ownServer && nodes*dbConns > devMaxConnections/2
	}
	return false
}

func (a *app) runDev(ctx context.Context, weights []float64, replicas int, ports devPorts, bouncer, stateDir, warcDir string) error {
	tport, uiport, pgport := ports.temporal, ports.ui, ports.pg
	if err := os.MkdirAll(filepath.Join(stateDir, "logs"), 0o755); err != nil {
		return err
	}
	cfg := a.cfg
	state := DevState{ControlQueue: cfg.ControlQueue}

	if cfg.From.DatabaseURL == "default" {
		if err := portFree(pgport, "Postgres", "--pg-port"); err != nil {
			return err
		}
		fmt.Println("starting Postgres (throwaway cluster) on 127.0.0.1:" + strconv.Itoa(pgport) + " ...")
		pgLog, err := os.Create(filepath.Join(stateDir, "logs", "postgres.log"))
		if err != nil {
			return err
		}
		defer pgLog.Close()
		pg, err := devstack.StartPostgres(ctx, devstack.PostgresOptions{Port: pgport, Output: pgLog, MaxConnections: devMaxConnections})
		if err != nil {
			return err
		}
		defer pg.Stop() //nolint:errcheck
		if cfg.DatabaseURL, err = pg.CreateDatabase(ctx, "spiderpool"); err != nil {
			return err
		}
	}
	if wantPgBouncer(bouncer, len(weights), cfg.Node.DBConns, cfg.From.DatabaseURL != "default") {
		if err := portFree(ports.bouncer, "PgBouncer", "--pgbouncer-port"); err != nil {
			return err
		}
		upstream, err := devstack.UpstreamOf(cfg.DatabaseURL)
		if err != nil {
			return err
		}
		fmt.Printf("starting PgBouncer (transaction mode) on 127.0.0.1:%d in front of %s:%d ...\n", ports.bouncer, upstream.Host, upstream.Port)
		bLog, err := os.Create(filepath.Join(stateDir, "logs", "pgbouncer.log"))
		if err != nil {
			return err
		}
		defer bLog.Close()
		b, err := devstack.StartPgBouncer(ctx, devstack.PgBouncerOptions{Port: ports.bouncer, Upstream: upstream, Output: bLog})
		if err != nil {
			return err
		}
		defer b.Stop() //nolint:errcheck
		state.DirectDatabaseURL = config.RedactDatabaseURL(cfg.DatabaseURL)
		cfg.DatabaseURL = b.URL(upstream.Database)
	}
	state.DatabaseURL = cfg.DatabaseURL

	if cfg.From.TemporalAddress == "default" {
		if err := portFree(tport, "Temporal", "--temporal-port"); err != nil {
			return err
		}
		if err := portFree(uiport, "the Temporal Web UI", "--ui-port"); err != nil {
			return err
		}
		fmt.Println("starting Temporal dev server on 127.0.0.1:" + strconv.Itoa(tport) + " ...")
		tLog, err := os.Create(filepath.Join(stateDir, "logs", "temporal.log"))
		if err != nil {
			return err
		}
		defer tLog.Close()
		t, err := devstack.StartTemporal(ctx, devstack.TemporalOptions{Port: tport, UIPort: uiport, Output: tLog})
		if err != nil {
			return err
		}
		defer t.Stop() //nolint:errcheck
		cfg.TemporalAddress = t.Address()
		state.WebUI = "http://localhost:" + strconv.Itoa(uiport)
	}
	state.TemporalAddress = cfg.TemporalAddress

	st, err := store.Connect(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	if _, err := st.Migrate(ctx, a.logger()); err != nil {
		return err
	}

	self, err := os.Executable()
	if err != nil {
		return err
	}
	// The nodes serve page bodies to processors that present this secret;
	// dev.env names its file for processors started by hand.
	secretFile, err := filepath.Abs(filepath.Join(stateDir, "node-secret"))
	if err != nil {
		return err
	}
	if _, err := config.WriteNodeSecret(secretFile); err != nil {
		return err
	}
	var procs []*exec.Cmd
	var wg sync.WaitGroup
	defer func() {
		for _, p := range procs {
			_ = p.Process.Signal(syscall.SIGTERM)
		}
		wg.Wait()
	}()
	for i, w := range weights {
		id := fmt.Sprintf("node-%d", i+1)
		logPath := filepath.Join(stateDir, "logs", id+".log")
		logFile, err := os.Create(logPath)
		if err != nil {
			return err
		}
		defer logFile.Close()
		// The dev stack crawls webs on this machine: its nodes opt in to
		// private addresses, which nodes refuse by default.
		// A generous connect timeout: fifty nodes starting at once keep
		// the dev server busy for more than the default 5 s.
		args := []string{"worker", "--node", id, "--weight", strconv.FormatFloat(w, 'g', -1, 64),
			"--log-level", cfg.LogLevel, "--allow-private-networks", "--connect-timeout", "30s",
			"--replicas", strconv.Itoa(replicas), "--bodies-addr", "127.0.0.1:0"}
		var metricsURL string
		if ports.metrics > 0 {
			port := ports.metrics + i
			if err := portFree(port, id+"'s metrics", "--metrics-port"); err != nil {
				return err
			}
			args = append(args, "--metrics-addr", "127.0.0.1:"+strconv.Itoa(port))
			metricsURL = "http://127.0.0.1:" + strconv.Itoa(port) + "/metrics"
		}
		if warcDir != "" {
			args = append(args, "--warc-dir", warcDir)
		}
		p := exec.Command(self, args...)
		p.Env = append(os.Environ(),
			config.EnvDatabaseURL+"="+cfg.DatabaseURL,
			config.EnvTemporalAddress+"="+cfg.TemporalAddress,
			config.EnvNamespace+"="+cfg.Namespace,
			config.EnvControlQueue+"="+cfg.ControlQueue,
			config.EnvNodeSecretFile+"="+secretFile)
		if cfg.From.TemporalAddress == "default" {
			// The dev server started above speaks plain gRPC, whatever TLS
			// or API key the environment or a temporal CLI profile holds.
			p.Env = append(p.Env, "TEMPORAL_TLS=false")
		}
		p.Stdout, p.Stderr = logFile, logFile
		devstack.DieWithParent(p, syscall.SIGTERM)
		if err := p.Start(); err != nil {
			return fmt.Errorf("start %s: %w", id, err)
		}
		procs = append(procs, p)
		state.Nodes = append(state.Nodes, DevNode{ID: id, Weight: w, PID: p.Process.Pid, Log: logPath, Metrics: metricsURL,
			Identities: config.Node{ID: id, Replicas: replicas}.IDs()})
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := p.Wait()
			if ctx.Err() == nil {
				fmt.Printf("%s (pid %d) exited: %v; its hosts move to the other nodes\n", id, p.Process.Pid, err)
			}
		}()
	}
	if err := waitRegistered(ctx, st, state.Nodes); err != nil {
		return err
	}

	doc, _ := json.MarshalIndent(state, "", "  ")
	if err := os.WriteFile(filepath.Join(stateDir, "dev.json"), doc, 0o644); err != nil {
		return err
	}
	envFile := filepath.Join(stateDir, "dev.env")
	env := fmt.Sprintf("export %s=%q\nexport %s=%q\nexport %s=%q\nexport %s=%q\n", config.EnvDatabaseURL, cfg.DatabaseURL,
		config.EnvTemporalAddress, cfg.TemporalAddress, config.EnvControlQueue, cfg.ControlQueue,
		config.EnvNodeSecretFile, secretFile)
	if err := os.WriteFile(envFile, []byte(env), 0o644); err != nil {
		return err
	}
	fmt.Println("\nspiderpool dev is up")
	fmt.Printf("  Temporal   %s\n", cfg.TemporalAddress)
	if state.WebUI != "" {
		fmt.Printf("  Web UI     %s\n", state.WebUI)
	}
	fmt.Printf("  Postgres   %s (the nodes' URL)\n", cfg.DatabaseURL)
	if state.DirectDatabaseURL != "" {
		fmt.Printf("             through PgBouncer (transaction mode), which fronts %s\n", state.DirectDatabaseURL)
	}
	for _, n := range state.Nodes {
		fmt.Printf("  %-10s weight %-4g pid %-7d log %s  %s\n", n.ID, n.Weight, n.PID, n.Log, n.Metrics)
	}
	if warcDir != "" {
		fmt.Printf("  WARC files %s\n", warcDir)
	}
	fmt.Printf("  Bodies     on 127.0.0.1, to processors with the node secret in %s\n", secretFile)
	fmt.Printf("\nIn another shell:  source %s\n", envFile)
	fmt.Println("  bin/spiderpool campaign start --seed http://127.0.0.1:PORT/ --wait")
	fmt.Println("Kill a node (kill -9 PID) to watch its hosts move. Ctrl-C stops everything.")
	<-ctx.Done()
	fmt.Println("\nstopping ...")
	return nil
}

func waitRegistered(ctx context.Context, st *store.Store, nodes []DevNode) error {
	deadline := time.Now().Add(time.Minute)
	for {
		reg, err := st.Nodes(ctx, nil)
		if err != nil {
			return err
		}
		alive := map[string]bool{}
		for _, n := range reg {
			alive[n.ID] = n.Alive
		}
		ready := true
		for _, n := range nodes {
			for _, id := range n.Identities {
				ready = ready && alive[id]
			}
		}
		if ready {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("nodes did not register within a minute; see their logs in the state dir")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
