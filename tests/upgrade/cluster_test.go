package upgrade

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/config"
	"github.com/spiderpool/spiderpool/devstack"
	"github.com/spiderpool/spiderpool/tests/harness"
)

var bg = context.Background()

// cluster is one test's deployment: its own database, left empty for the
// first nodes to migrate as a fresh install would, and its own control
// queue on the shared Temporal dev server. Every node is a real process of
// a given spiderpool binary.
type cluster struct {
	t       *testing.T
	name    string
	dbURL   string
	queue   string
	address string
	db      *pgxpool.Pool
	tc      client.Client
}

func newCluster(t *testing.T, name string) *cluster {
	t.Helper()
	c := &cluster{t: t, name: name, queue: "spiderpool.control." + name, address: harness.Temporal(t).Address()}
	c.dbURL = emptyDatabase(t, fmt.Sprintf("sp_upgrade_%s_%d", name, os.Getpid()))
	pool, err := pgxpool.New(bg, c.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	c.db = pool
	tc, err := client.Dial(client.Options{HostPort: c.address, Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	c.tc = tc
	return c
}

// emptyDatabase creates a database with no schema, dropped when the test
// ends.
func emptyDatabase(t *testing.T, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	admin := os.Getenv("DATABASE_URL")
	if pg := harness.Cluster(t); pg != nil {
		admin = pg.URL("postgres")
	}
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("database URL %q: %v", admin, err)
	}
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(bg)
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(bg, time.Minute)
		defer cancel()
		if c, err := pgx.Connect(ctx, admin); err == nil {
			_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)")
			_ = c.Close(ctx)
		}
	})
	u.Path = "/" + name
	return u.String()
}

func (c *cluster) env() []string {
	return append(os.Environ(),
		config.EnvDatabaseURL+"="+c.dbURL,
		config.EnvTemporalAddress+"="+c.address,
		config.EnvControlQueue+"="+c.queue)
}

// count runs a query of one integer.
func (c *cluster) count(query string, args ...any) int64 {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	var n int64
	if err := c.db.QueryRow(ctx, query, args...).Scan(&n); err != nil {
		c.t.Fatalf("%s: %v", query, err)
	}
	return n
}

// strings runs a query of one text column.
func (c *cluster) strings(query string, args ...any) []string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	rows, err := c.db.Query(ctx, query, args...)
	if err != nil {
		c.t.Fatalf("%s: %v", query, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		c.t.Fatalf("%s: %v", query, err)
	}
	return out
}

// node is a `spiderpool worker` process of some release.
type node struct {
	id      string
	release string
	cmd     *exec.Cmd
	done    chan struct{}
	err     error
	log     string
}

// startNode runs bin as node id and waits until it has registered (and so
// migrated the schema to what it knows).
func (c *cluster) startNode(bin, release, short string, weight float64) *node {
	c.t.Helper()
	id := c.name + "-" + short
	n := &node{id: id, release: release, done: make(chan struct{}), log: filepath.Join(c.t.TempDir(), id+".log")}
	logFile, err := os.Create(n.log)
	if err != nil {
		c.t.Fatal(err)
	}
	n.cmd = exec.Command(bin, "worker", "--node", id, "--weight", strconv.FormatFloat(weight, 'g', -1, 64),
		"--heartbeat-interval", "1s", "--ttl", "4s", "--allow-private-networks", "--db-conns", "8", "--log-level", "info")
	n.cmd.Env = c.env()
	n.cmd.Stdout, n.cmd.Stderr = logFile, logFile
	devstack.DieWithParent(n.cmd, syscall.SIGKILL)
	if err := n.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	go func() { n.err = n.cmd.Wait(); logFile.Close(); close(n.done) }()
	c.t.Cleanup(func() { n.stop(syscall.SIGKILL) })
	harness.Eventually(c.t, time.Minute, release+" node "+id+" to register", func() bool {
		select {
		case <-n.done:
			c.t.Fatalf("%s node %s exited: %v\n%s", release, id, n.err, n.tail())
		default:
		}
		var ok bool
		err := c.db.QueryRow(bg, `SELECT EXISTS (SELECT 1 FROM nodes WHERE id = $1 AND stopped_at IS NULL)`, id).Scan(&ok)
		return err == nil && ok // no nodes table yet: the first node is migrating
	})
	return n
}

func (n *node) exited() bool {
	select {
	case <-n.done:
		return true
	default:
		return false
	}
}

// stop signals the process and waits for it, a minute at most before
// SIGKILL.
func (n *node) stop(sig syscall.Signal) {
	if n.exited() {
		return
	}
	_ = n.cmd.Process.Signal(sig)
	select {
	case <-n.done:
	case <-time.After(time.Minute):
		_ = n.cmd.Process.Kill()
		<-n.done
	}
}

// tail is the end of the node's log, for failure messages.
func (n *node) tail() string {
	b, _ := os.ReadFile(n.log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// cli runs a spiderpool command of some release against the cluster.
func (c *cluster) cli(bin string, stdin string, args ...string) string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = c.env()
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		c.t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// runFacts is what one run of the campaign workflow's history shows.
type runFacts struct {
	// current: the run took this release's dispatcher (its history has
	// the host-aware-flow version marker); otherwise the v0.1.0 one.
	current bool
	events  int
	// taskFailures are workflow tasks that failed, by cause and by the
	// worker identity (node@host:pid) that failed them. Temporal records
	// the first failure of a streak only; retries that fail again are
	// transient and leave no event.
	taskFailures []string
	// tasksBy counts the workflow tasks each node started.
	tasksBy map[string]int
}

// runs reads every run of the workflow, first to last, following
// continue-as-new backwards from the latest.
func (c *cluster) runs(workflowID string) []runFacts {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(bg, 2*time.Minute)
	defer cancel()
	var out []runFacts
	runID := ""
	for {
		f := runFacts{tasksBy: map[string]int{}}
		it := c.tc.GetWorkflowHistory(ctx, workflowID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		prev := ""
		for it.HasNext() {
			e, err := it.Next()
			if err != nil {
				c.t.Fatalf("history of %s run %q: %v", workflowID, runID, err)
			}
			f.events++
			switch e.GetEventType() {
			case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
				prev = e.GetWorkflowExecutionStartedEventAttributes().GetContinuedExecutionRunId()
			case enumspb.EVENT_TYPE_MARKER_RECORDED:
				for _, p := range e.GetMarkerRecordedEventAttributes().GetDetails() {
					for _, pl := range p.GetPayloads() {
						if strings.Contains(string(pl.GetData()), "host-aware-flow") {
							f.current = true
						}
					}
				}
			case enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED:
				node, _, _ := strings.Cut(e.GetWorkflowTaskStartedEventAttributes().GetIdentity(), "@")
				f.tasksBy[node]++
			case enumspb.EVENT_TYPE_WORKFLOW_TASK_FAILED:
				a := e.GetWorkflowTaskFailedEventAttributes()
				f.taskFailures = append(f.taskFailures, a.GetCause().String()+" by "+a.GetIdentity())
			}
		}
		out = append([]runFacts{f}, out...)
		if prev == "" {
			return out
		}
		runID = prev
	}
}

// resetSticky sends the workflow's next task to its task queue, where any
// worker polling it may take it, instead of to the worker that has it
// cached: what a cache eviction or a worker restart does.
func (c *cluster) resetSticky(workflowID string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	_, err := c.tc.WorkflowService().ResetStickyTaskQueue(ctx, &workflowservice.ResetStickyTaskQueueRequest{
		Namespace: "default", Execution: &commonpb.WorkflowExecution{WorkflowId: workflowID},
	})
	if err != nil {
		c.t.Fatalf("reset sticky task queue of %s: %v", workflowID, err)
	}
}

// describe says what a workflow that did not end is waiting for: its
// pending activities and its own status, for failure messages.
func (c *cluster) describe(workflowID string) string {
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	var b strings.Builder
	d, err := c.tc.DescribeWorkflowExecution(ctx, workflowID, "")
	if err != nil {
		return "describe: " + err.Error()
	}
	for _, a := range d.GetPendingActivities() {
		fmt.Fprintf(&b, "pending %s %s since %s, attempt %d, last worker %q\n", a.GetActivityType().GetName(), a.GetState(),
			a.GetScheduledTime().AsTime().Format(time.StampMilli), a.GetAttempt(), a.GetLastWorkerIdentity())
	}
	for _, h := range c.strings(`SELECT to_char(changed_at, 'HH24:MI:SS.MS') || ' ' || node || ' ' || old_state || '->' || new_state || ' (' || reason || ') after lease ' || after_lease FROM node_weight_history ORDER BY id`) {
		fmt.Fprintln(&b, "ring change", h)
	}
	v, err := c.tc.QueryWorkflow(ctx, workflowID, "", campaign.StatusQuery)
	if err != nil {
		return b.String() + "status: " + err.Error()
	}
	var st map[string]any
	if err := v.Get(&st); err != nil {
		return b.String() + "status: " + err.Error()
	}
	fmt.Fprintf(&b, "status: %v", st)
	return b.String()
}
