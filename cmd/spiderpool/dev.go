package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
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
			return a.runDev(cmd.Context(), devOptions{
				weights: ws, replicas: replicas, bouncer: bouncer, stateDir: stateDir, warcDir: warcDir,
				ports: devPorts{temporal: tport, ui: uiport, pg: pgport, bouncer: bport, metrics: mport},
			})
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

// devOptions are what `spiderpool dev` was asked to run.
type devOptions struct {
	weights  []float64 // one node process per weight
	replicas int       // node identities in each process
	ports    devPorts
	bouncer  string // --pgbouncer: auto, on or off
	stateDir string
	warcDir  string
}

// devStack is the stack `spiderpool dev` runs, and what it undoes when it
// ends: last started, first stopped.
type devStack struct {
	opts  devOptions
	cfg   config.Config // as the nodes see it
	state DevState
	nodes []*devstack.Node
	// watchers report nodes that exit while the stack runs.
	watchers sync.WaitGroup
	undo     []func()
}

func (a *app) runDev(ctx context.Context, opts devOptions) error {
	if err := os.MkdirAll(filepath.Join(opts.stateDir, "logs"), 0o755); err != nil {
		return err
	}
	d := &devStack{opts: opts, cfg: a.cfg, state: DevState{ControlQueue: a.cfg.ControlQueue}}
	defer d.stop()
	if err := d.startPostgres(ctx); err != nil {
		return err
	}
	if err := d.startPgBouncer(ctx); err != nil {
		return err
	}
	d.state.DatabaseURL = d.cfg.DatabaseURL
	if err := d.startTemporal(ctx); err != nil {
		return err
	}
	d.state.TemporalAddress = d.cfg.TemporalAddress
	st, err := d.migrate(ctx, a.logger())
	if err != nil {
		return err
	}
	secretFile, err := writeDevSecret(opts.stateDir)
	if err != nil {
		return err
	}
	if err := d.startNodes(ctx, secretFile); err != nil {
		return err
	}
	if err := devstack.WaitRegistered(ctx, st, time.Minute, d.nodes...); err != nil {
		return fmt.Errorf("%w; see their logs in %s", err, filepath.Join(opts.stateDir, "logs"))
	}
	envFile, err := d.writeStateFiles(secretFile)
	if err != nil {
		return err
	}
	d.printUp(secretFile, envFile)
	<-ctx.Done()
	fmt.Println("\nstopping ...")
	return nil
}

// onStop has f run when the stack stops, before what was started earlier
// is stopped.
func (d *devStack) onStop(f func()) { d.undo = append(d.undo, f) }

// stop undoes the stack, last started first.
func (d *devStack) stop() {
	for i := len(d.undo) - 1; i >= 0; i-- {
		d.undo[i]()
	}
}

// logFile creates <state-dir>/logs/<name>.log, closed when the stack stops.
func (d *devStack) logFile(name string) (*os.File, error) {
	f, err := os.Create(filepath.Join(d.opts.stateDir, "logs", name+".log"))
	if err != nil {
		return nil, err
	}
	d.onStop(func() { f.Close() })
	return f, nil
}

// startPostgres starts the private throwaway cluster, unless DATABASE_URL
// names a server of the user's.
func (d *devStack) startPostgres(ctx context.Context) error {
	if d.cfg.From.DatabaseURL != "default" {
		return nil
	}
	port := d.opts.ports.pg
	if err := portFree(port, "Postgres", "--pg-port"); err != nil {
		return err
	}
	fmt.Println("starting Postgres (throwaway cluster) on 127.0.0.1:" + strconv.Itoa(port) + " ...")
	out, err := d.logFile("postgres")
	if err != nil {
		return err
	}
	pg, err := devstack.StartPostgres(ctx, devstack.PostgresOptions{Port: port, Output: out, MaxConnections: devMaxConnections})
	if err != nil {
		return err
	}
	d.onStop(func() { _ = pg.Stop() })
	d.cfg.DatabaseURL, err = pg.CreateDatabase(ctx, "spiderpool")
	return err
}

// startPgBouncer puts PgBouncer in front of Postgres when wantPgBouncer
// says so; the nodes then connect to it.
func (d *devStack) startPgBouncer(ctx context.Context) error {
	if !wantPgBouncer(d.opts.bouncer, len(d.opts.weights), d.cfg.Node.DBConns, d.cfg.From.DatabaseURL != "default") {
		return nil
	}
	port := d.opts.ports.bouncer
	if err := portFree(port, "PgBouncer", "--pgbouncer-port"); err != nil {
		return err
	}
	upstream, err := devstack.UpstreamOf(d.cfg.DatabaseURL)
	if err != nil {
		return err
	}
	fmt.Printf("starting PgBouncer (transaction mode) on 127.0.0.1:%d in front of %s:%d ...\n", port, upstream.Host, upstream.Port)
	out, err := d.logFile("pgbouncer")
	if err != nil {
		return err
	}
	b, err := devstack.StartPgBouncer(ctx, devstack.PgBouncerOptions{Port: port, Upstream: upstream, Output: out})
	if err != nil {
		return err
	}
	d.onStop(func() { _ = b.Stop() })
	d.state.DirectDatabaseURL = config.RedactDatabaseURL(d.cfg.DatabaseURL)
	d.cfg.DatabaseURL = b.URL(upstream.Database)
	return nil
}

// startTemporal starts the Temporal dev server with its Web UI, unless
// TEMPORAL_ADDRESS names a server of the user's.
func (d *devStack) startTemporal(ctx context.Context) error {
	if d.cfg.From.TemporalAddress != "default" {
		return nil
	}
	port, uiPort := d.opts.ports.temporal, d.opts.ports.ui
	if err := portFree(port, "Temporal", "--temporal-port"); err != nil {
		return err
	}
	if err := portFree(uiPort, "the Temporal Web UI", "--ui-port"); err != nil {
		return err
	}
	fmt.Println("starting Temporal dev server on 127.0.0.1:" + strconv.Itoa(port) + " ...")
	out, err := d.logFile("temporal")
	if err != nil {
		return err
	}
	t, err := devstack.StartTemporal(ctx, devstack.TemporalOptions{Port: port, UIPort: uiPort, Output: out})
	if err != nil {
		return err
	}
	d.onStop(func() { _ = t.Stop() })
	d.cfg.TemporalAddress = t.Address()
	d.state.WebUI = "http://localhost:" + strconv.Itoa(uiPort)
	return nil
}

// migrate brings the database's schema up to date before any node starts,
// and keeps the store open to watch the nodes register.
func (d *devStack) migrate(ctx context.Context, log *slog.Logger) (*store.Store, error) {
	st, err := store.Connect(ctx, d.cfg)
	if err != nil {
		return nil, err
	}
	d.onStop(st.Close)
	if _, err := st.Migrate(ctx, log); err != nil {
		return nil, err
	}
	return st, nil
}

// writeDevSecret writes a node secret to <state-dir>/node-secret (keeping
// one there) and returns the file's absolute path. The nodes serve page
// bodies to processors that present it; dev.env names the file for
// processors started by hand.
func writeDevSecret(stateDir string) (string, error) {
	file, err := filepath.Abs(filepath.Join(stateDir, "node-secret"))
	if err != nil {
		return "", err
	}
	_, err = config.WriteNodeSecret(file)
	return file, err
}

// startNodes starts a node process per weight, stopped (SIGTERM, all at
// once) when the stack stops.
func (d *devStack) startNodes(ctx context.Context, secretFile string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	d.onStop(func() {
		devstack.StopNodes(d.nodes...)
		d.watchers.Wait()
	})
	env := devstack.Env{DatabaseURL: d.cfg.DatabaseURL, TemporalAddress: d.cfg.TemporalAddress, Namespace: d.cfg.Namespace,
		ControlQueue: d.cfg.ControlQueue, NodeSecretFile: secretFile}
	if d.cfg.From.TemporalAddress == "default" {
		// The dev server started above speaks plain gRPC, whatever TLS
		// or API key the environment or a temporal CLI profile holds.
		env.Extra = []string{"TEMPORAL_TLS=false"}
	}
	for i, w := range d.opts.weights {
		if err := d.startNode(ctx, self, i, w, env); err != nil {
			return err
		}
	}
	return nil
}

// startNode starts node-<i+1>, logging to <state-dir>/logs, and reports
// its exit should it die while the stack runs.
func (d *devStack) startNode(ctx context.Context, bin string, i int, weight float64, env devstack.Env) error {
	id := fmt.Sprintf("node-%d", i+1)
	// The dev stack crawls webs on this machine: its nodes opt in to
	// private addresses, which nodes refuse by default.
	// A generous connect timeout: fifty nodes starting at once keep
	// the dev server busy for more than the default 5 s.
	flags := []string{"--log-level", d.cfg.LogLevel, "--allow-private-networks", "--connect-timeout", "30s",
		"--bodies-addr", "127.0.0.1:0"}
	var metricsURL string
	if d.opts.ports.metrics > 0 {
		port := d.opts.ports.metrics + i
		if err := portFree(port, id+"'s metrics", "--metrics-port"); err != nil {
			return err
		}
		flags = append(flags, "--metrics-addr", "127.0.0.1:"+strconv.Itoa(port))
		metricsURL = "http://127.0.0.1:" + strconv.Itoa(port) + "/metrics"
	}
	if d.opts.warcDir != "" {
		flags = append(flags, "--warc-dir", d.opts.warcDir)
	}
	logPath := filepath.Join(d.opts.stateDir, "logs", id+".log")
	n, err := devstack.StartNode(devstack.NodeOptions{
		Binary: bin, ID: id, Weight: weight, Replicas: d.opts.replicas, Flags: flags, Env: env,
		ProcessOptions: devstack.ProcessOptions{Log: logPath, ParentDeath: syscall.SIGTERM},
	})
	if err != nil {
		return err
	}
	d.nodes = append(d.nodes, n)
	d.state.Nodes = append(d.state.Nodes, DevNode{ID: id, Weight: weight, PID: n.PID(), Log: logPath, Metrics: metricsURL,
		Identities: n.Identities})
	d.watchers.Go(func() {
		<-n.Exited()
		if ctx.Err() == nil {
			fmt.Printf("%s (pid %d) exited: %v; its hosts move to the other nodes\n", id, n.PID(), n.Err())
		}
	})
	return nil
}

// writeStateFiles writes dev.json, for scripts, and dev.env, for shells,
// to the state directory; it returns dev.env's path.
func (d *devStack) writeStateFiles(secretFile string) (string, error) {
	doc, _ := json.MarshalIndent(d.state, "", "  ")
	if err := os.WriteFile(filepath.Join(d.opts.stateDir, "dev.json"), doc, 0o644); err != nil {
		return "", err
	}
	envFile := filepath.Join(d.opts.stateDir, "dev.env")
	env := fmt.Sprintf("export %s=%q\nexport %s=%q\nexport %s=%q\nexport %s=%q\n", config.EnvDatabaseURL, d.cfg.DatabaseURL,
		config.EnvTemporalAddress, d.cfg.TemporalAddress, config.EnvControlQueue, d.cfg.ControlQueue,
		config.EnvNodeSecretFile, secretFile)
	return envFile, os.WriteFile(envFile, []byte(env), 0o644)
}

// printUp tells the user where everything is and what to do next.
func (d *devStack) printUp(secretFile, envFile string) {
	fmt.Println("\nspiderpool dev is up")
	fmt.Printf("  Temporal   %s\n", d.cfg.TemporalAddress)
	if d.state.WebUI != "" {
		fmt.Printf("  Web UI     %s\n", d.state.WebUI)
	}
	fmt.Printf("  Postgres   %s (the nodes' URL)\n", d.cfg.DatabaseURL)
	if d.state.DirectDatabaseURL != "" {
		fmt.Printf("             through PgBouncer (transaction mode), which fronts %s\n", d.state.DirectDatabaseURL)
	}
	for _, n := range d.state.Nodes {
		fmt.Printf("  %-10s weight %-4g pid %-7d log %s  %s\n", n.ID, n.Weight, n.PID, n.Log, n.Metrics)
	}
	if d.opts.warcDir != "" {
		fmt.Printf("  WARC files %s\n", d.opts.warcDir)
	}
	fmt.Printf("  Bodies     on 127.0.0.1, to processors with the node secret in %s\n", secretFile)
	fmt.Printf("\nIn another shell:  source %s\n", envFile)
	fmt.Println("  bin/spiderpool campaign start --seed http://127.0.0.1:PORT/ --wait")
	fmt.Println("Kill a node (kill -9 PID) to watch its hosts move. Ctrl-C stops everything.")
}
