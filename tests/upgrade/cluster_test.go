package upgrade

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	sdklog "go.temporal.io/sdk/log"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/devstack"
	"github.com/spiderpool/spiderpool/store"
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
	st      *store.Store
	tc      client.Client
	// nodes are the nodes started, by ID.
	nodes map[string]*node
}

func newCluster(t *testing.T, name string) *cluster {
	t.Helper()
	c := &cluster{t: t, name: name, queue: "spiderpool.control." + name, address: harness.Temporal(t).Address(),
		nodes: map[string]*node{}}
	c.dbURL = emptyDatabase(t, fmt.Sprintf("sp_upgrade_%s_%d", name, os.Getpid()))
	// This tree's store, on a schema either release migrated: what the
	// test reads of it (the registry, pages, processor status) both have.
	st, err := store.Open(bg, c.dbURL, 4, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	c.st = st
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

// env is where the cluster's processes find it. The node secret is in
// this process's environment (harness.Main puts it there), so every node
// inherits it: this release's nodes need it to serve bodies
// (--bodies-addr); the previous release's do not read it.
func (c *cluster) env() devstack.Env {
	return devstack.Env{DatabaseURL: c.dbURL, TemporalAddress: c.address, ControlQueue: c.queue}
}

// count runs a query of one integer.
func (c *cluster) count(query string, args ...any) int64 {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	var n int64
	if err := c.st.Pool().QueryRow(ctx, query, args...).Scan(&n); err != nil {
		c.t.Fatalf("%s: %v", query, err)
	}
	return n
}

// strings runs a query of one text column.
func (c *cluster) strings(query string, args ...any) []string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(bg, 30*time.Second)
	defer cancel()
	rows, err := c.st.Pool().Query(ctx, query, args...)
	if err != nil {
		c.t.Fatalf("%s: %v", query, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		c.t.Fatalf("%s: %v", query, err)
	}
	return out
}

// thisRelease names the release of nodes built from this tree; the other
// is PreviousRelease.
const thisRelease = "this tree"

// node is a `spiderpool worker` process of some release.
type node struct {
	*devstack.Node
	release string
}

// nodeFlags are the worker flags every node gets, of either release:
// quick heartbeats and a short TTL, so joins and stops show within
// seconds, and fetches allowed to the loopback web.
var nodeFlags = []string{"--heartbeat-interval", "1s", "--ttl", "4s", "--allow-private-networks",
	"--db-conns", "8", "--log-level", "info"}

// startNode runs bin as node id with nodeFlags and extra, and waits until
// it has registered (and so migrated the schema to what it knows).
func (c *cluster) startNode(bin, release, short string, weight float64, extra ...string) *node {
	c.t.Helper()
	id := c.name + "-" + short
	dn, err := devstack.StartNode(devstack.NodeOptions{
		Binary: bin, ID: id, Weight: weight, Flags: append(slices.Clone(nodeFlags), extra...), Env: c.env(),
		ProcessOptions: devstack.ProcessOptions{Log: filepath.Join(c.t.TempDir(), id+".log")},
	})
	if err != nil {
		c.t.Fatal(err)
	}
	n := &node{Node: dn, release: release}
	c.t.Cleanup(func() { _ = n.Kill() })
	c.nodes[id] = n
	// Until the first node has migrated there is no registry: the wait
	// takes that as not registered yet.
	if err := devstack.WaitRegistered(bg, c.st, time.Minute, dn); err != nil {
		c.t.Fatalf("%s node %s: %v\n%s", release, id, err, n.tail())
	}
	return n
}

func (n *node) exited() bool {
	select {
	case <-n.Exited():
		return true
	default:
		return false
	}
}

// tail is the end of the node's log, for failure messages.
func (n *node) tail() string {
	b := n.Log()
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return b
}

// releaseOf is the release of the node id, "" for none of the cluster's.
func (c *cluster) releaseOf(id string) string {
	if n, ok := c.nodes[id]; ok {
		return n.release
	}
	return ""
}

// cli runs a spiderpool command of some release against the cluster.
func (c *cluster) cli(bin string, stdin string, args ...string) string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(bg, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = c.env().Environ()
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		c.t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// runFacts is what one run of the campaign workflow's history shows.
type runFacts struct {
	events int
	// versions are the run's version markers: change ID to version
	// (host-aware-flow 2 is a pool run; see workflows).
	versions map[string]int
	// startedBy is the node that completed the run's first workflow task,
	// whose code recorded the run's version markers.
	startedBy string
	// tasksBy counts the workflow tasks each node started.
	tasksBy map[string]int
	// failures are the workflow tasks that failed. Temporal records the
	// first failure of a streak only; retries that fail again are
	// transient and leave no event.
	failures []taskFailure
}

// taskFailure is a failed workflow task: the node that failed it, why,
// and the start of the failure's message.
type taskFailure struct {
	node    string
	cause   enumspb.WorkflowTaskFailedCause
	message string
}

func (f taskFailure) String() string { return fmt.Sprintf("%s %s (%q)", f.node, f.cause, f.message) }

// The SDK's version marker (workflow.GetVersion) and its details.
const (
	versionMarker   = "Version"
	versionChangeID = "change-id"
	versionNumber   = "version"
)

// runs reads every run of the workflow, first to last, following
// continue-as-new backwards from the latest.
func (c *cluster) runs(workflowID string) []runFacts {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(bg, 2*time.Minute)
	defer cancel()
	var out []runFacts
	runID := ""
	for {
		f := runFacts{versions: map[string]int{}, tasksBy: map[string]int{}}
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
				if m := e.GetMarkerRecordedEventAttributes(); m.GetMarkerName() == versionMarker {
					var change string
					var version int
					dc := converter.GetDefaultDataConverter()
					if dc.FromPayloads(m.GetDetails()[versionChangeID], &change) == nil &&
						dc.FromPayloads(m.GetDetails()[versionNumber], &version) == nil {
						f.versions[change] = version
					}
				}
			case enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED:
				f.tasksBy[nodeOf(e.GetWorkflowTaskStartedEventAttributes().GetIdentity())]++
			case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
				if f.startedBy == "" {
					f.startedBy = nodeOf(e.GetWorkflowTaskCompletedEventAttributes().GetIdentity())
				}
			case enumspb.EVENT_TYPE_WORKFLOW_TASK_FAILED:
				a := e.GetWorkflowTaskFailedEventAttributes()
				msg := a.GetFailure().GetMessage()
				f.failures = append(f.failures, taskFailure{node: nodeOf(a.GetIdentity()), cause: a.GetCause(), message: msg[:min(len(msg), 300)]})
			}
		}
		out = append([]runFacts{f}, out...)
		if prev == "" {
			return out
		}
		runID = prev
	}
}

// nodeOf is the node ID of a workflow worker identity (node@host:pid).
func nodeOf(identity string) string {
	id, _, _ := strings.Cut(identity, "@")
	return id
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
