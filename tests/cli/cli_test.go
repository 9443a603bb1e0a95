// Package cli tests the spiderpool command's contracts with scripts: its
// exit codes (docs/operations.md, "Exit codes"), its --json output, Ctrl-C in watch,
// and `version`. Every test runs the real binary as a process; those that
// need a campaign run it against real Postgres and the Temporal dev
// server, with nodes in-process (tests/harness).
package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/devstack"
	"github.com/spiderpool/spiderpool/tests/harness"
	"github.com/spiderpool/spiderpool/tests/synthweb"
)

func TestMain(m *testing.M) { harness.Main(m) }

var bg = context.Background()

// The exit codes, as docs/operations.md documents them.
const (
	exitOK          = 0
	exitUsage       = 2
	exitUnreachable = 3
	exitEnded       = 4
	exitNotFound    = 5
)

// cliEnv is the environment the binary runs in: none of the caller's
// settings for Postgres or Temporal leak in.
func cliEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "TEMPORAL_") || strings.HasPrefix(kv, "DATABASE_URL=") || strings.HasPrefix(kv, "SPIDERPOOL_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "TEMPORAL_CONFIG_FILE="+filepath.Join(os.TempDir(), "spiderpool-cli-test-no-such.toml"))
}

// spiderpool runs the binary to its end, a minute at most.
func spiderpool(t *testing.T, stdin string, args ...string) harness.CommandResult {
	t.Helper()
	cmd := exec.Command(harness.Binary(t), args...)
	cmd.Env = cliEnv()
	cmd.Stdin = strings.NewReader(stdin)
	return harness.RunCommand(t, time.Minute, cmd)
}

func expect(t *testing.T, r harness.CommandResult, code int, stderrHas ...string) {
	t.Helper()
	if r.Code != code {
		t.Errorf("exit %d, want %d; stdout %q, stderr %q", r.Code, code, r.Stdout, r.Stderr)
	}
	for _, s := range stderrHas {
		if !strings.Contains(r.Stderr, s) {
			t.Errorf("stderr %q lacks %q", r.Stderr, s)
		}
	}
}

// TestUsageErrorsExit2: a wrong command line or spec is exit 2, before
// any server is dialled (the addresses given answer nothing).
func TestUsageErrorsExit2(t *testing.T) {
	nowhere := closedAddr(t)
	off := []string{"--temporal-address", nowhere, "--database-url", "postgres://x@" + nowhere + "/x", "--connect-timeout", "1s"}
	for _, tc := range []struct {
		name  string
		stdin string
		args  []string
		wants []string
	}{
		{"unknown command", "", []string{"crawl"}, []string{`unknown command "crawl"`}},
		{"unknown subcommand", "", []string{"campaign", "strat"}, []string{`unknown command "strat" for "spiderpool campaign"`}},
		{"unknown flag", "", []string{"campaign", "status", "x", "--colour"}, []string{"unknown flag: --colour"}},
		{"missing argument", "", []string{"campaign", "status"}, []string{"accepts 1 arg(s), received 0"}},
		{"weight not a number", "", []string{"campaign", "reweight", "c", "n", "heavy"}, []string{`weight "heavy": not a number`}},
		{"negative weight", "", []string{"campaign", "reweight", "c", "n", "--", "-1"}, []string{"weight: weight must be a finite number >= 0, got -1"}},
		{"truncated spec", `{"seeds":["http://127.0.0.1:1/"`, []string{"campaign", "start", "--spec", "-"},
			[]string{"the JSON ends early, at line 1, column 32 (byte 31)", "the list opened at line 1, column 10"}},
		{"spec with several errors", `{"seeds":"http://a/","limits":{"max_pages":-5,"max_depth":"deep"},"politness":{}}`,
			[]string{"campaign", "start", "--spec", "-"},
			[]string{"spec.seeds: want a list", "spec.limits.max_depth: want an integer", `spec: unknown field "politness"`,
				"spec.limits.max_pages: must be >= 0, got -5"}},
		{"spec file missing", "", []string{"campaign", "start", "--spec", filepath.Join(t.TempDir(), "none.json")}, []string{"read spec"}},
		{"worker without a node", "", []string{"worker"}, []string{"--node: node id must be 1..64 characters"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := spiderpool(t, tc.stdin, append(off, tc.args...)...)
			expect(t, r, exitUsage, tc.wants...)
			if strings.Contains(r.Stderr, "got a number") || strings.Contains(r.Stderr, "cannot reach") {
				t.Errorf("stderr %q: a usage error is reported as something else", r.Stderr)
			}
		})
	}
}

// TestCommandGroupAloneIsNotAnError: `spiderpool campaign` without a
// subcommand asks for the group's help, exit 0; a subcommand it does not
// have is a usage error (TestUsageErrorsExit2).
func TestCommandGroupAloneIsNotAnError(t *testing.T) {
	expect(t, spiderpool(t, "", "campaign"), exitOK)
}

// TestUnreachableExit3: Temporal or Postgres out of reach is exit 3.
func TestUnreachableExit3(t *testing.T) {
	nowhere := closedAddr(t)
	r := spiderpool(t, "", "campaign", "status", "any", "--temporal-address", nowhere, "--connect-timeout", "2s")
	expect(t, r, exitUnreachable, "cannot reach Temporal at "+nowhere)
	r = spiderpool(t, "", "migrate", "--database-url", "postgres://spiderpool@"+nowhere+"/spiderpool?sslmode=disable", "--connect-timeout", "2s")
	expect(t, r, exitUnreachable, "cannot reach Postgres at "+nowhere)
	r = spiderpool(t, "", "campaign", "start", "--seed", "http://127.0.0.1:1/", "--temporal-address", nowhere, "--connect-timeout", "2s")
	expect(t, r, exitUnreachable, "cannot reach Temporal at "+nowhere)
}

// TestWorkerUnreachableExit3: a node that cannot reach Postgres or
// Temporal as it starts, refused or silent past --connect-timeout, is exit
// 3 like every other command, and names the server it could not reach.
func TestWorkerUnreachableExit3(t *testing.T) {
	db := harness.NewDatabase(t)
	refused, silent := closedAddr(t), silentAddr(t)
	postgresAt := func(addr string) string { return "postgres://spiderpool@" + addr + "/spiderpool?sslmode=disable" }
	for _, tc := range []struct {
		name, databaseURL, temporalAddress string
		wants                              []string
		notNamed                           string
	}{
		{"Postgres refused", postgresAt(refused), silent, []string{"cannot reach Postgres at " + refused}, "Temporal"},
		{"Postgres silent", postgresAt(silent), refused, []string{"cannot reach Postgres at " + silent, "no answer within 1s"}, "Temporal"},
		{"Temporal refused", db, refused, []string{"cannot reach Temporal at " + refused}, "Postgres"},
		{"Temporal silent", db, silent, []string{"cannot reach Temporal at " + silent, "no answer within 1s"}, "Postgres"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := spiderpool(t, "", "worker", "--node", "n1", "--database-url", tc.databaseURL,
				"--temporal-address", tc.temporalAddress, "--connect-timeout", "1s")
			expect(t, r, exitUnreachable, tc.wants...)
			if strings.Contains(r.Stderr, tc.notNamed) {
				t.Errorf("stderr %q names %s, which was not tried or not at fault", r.Stderr, tc.notNamed)
			}
		})
	}
}

// stack is a test's Postgres database, control queue and three nodes, and
// the flags that point the CLI at them.
type stack struct {
	*harness.Stack
	flags []string
	web   *synthweb.Web
}

func newStack(t *testing.T) *stack {
	s := harness.NewStack(t)
	for _, n := range []string{"a", "b", "c"} {
		s.StartNode(n, 1)
	}
	web := harness.StartWeb(t, synthweb.Config{Hosts: 3, Pages: 60, LinksPerPage: 4, CrossHostFraction: 0.3, Seed: 16})
	return &stack{Stack: s, web: web, flags: []string{"--temporal-address", s.Config.TemporalAddress,
		"--database-url", s.Config.DatabaseURL, "--control-queue", s.Config.ControlQueue}}
}

func (s *stack) cli(t *testing.T, stdin string, args ...string) harness.CommandResult {
	t.Helper()
	return spiderpool(t, stdin, append(args, s.flags...)...)
}

// slowSpec crawls the synthetic web slowly enough to be steered: one
// request per host at a time, 500ms apart, so 30s for each host's 60
// pages.
func (s *stack) slowSpec() string {
	return `{"seeds":["` + s.web.Seed() + `"],"scope":{"allowed_domains":["127.0.0.1"]},
		"politeness":{"max_concurrency_per_host":1,"min_delay":"500ms"},"dispatch":{"batch_size":5}}`
}

// TestCampaignExitCodesAndJSON drives campaigns through the CLI: start,
// steer and watch with --json (exit 0), a campaign or node that does not
// exist (exit 5), Ctrl-C in watch (exit 0, the campaign goes on), and a
// watched campaign that is cancelled or fails (exit 4).
func TestCampaignExitCodesAndJSON(t *testing.T) {
	s := newStack(t)

	t.Run("not found", func(t *testing.T) {
		for _, args := range [][]string{
			{"campaign", "status", "no-such-campaign"},
			{"campaign", "watch", "no-such-campaign"},
			{"campaign", "cancel", "no-such-campaign"},
			{"campaign", "pause", "no-such-campaign"},
			{"campaign", "retry-failed", "no-such-campaign"},
		} {
			expect(t, s.cli(t, "", args...), exitNotFound, "no-such-campaign")
		}
	})

	id := "cli-steered-" + s.Name
	r := s.cli(t, s.slowSpec(), "campaign", "start", "--spec", "-", "--id", id, "--json")
	expect(t, r, exitOK)
	var started struct {
		CampaignID string `json:"campaign_id"`
		RunID      string `json:"run_id"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &started); err != nil || started.CampaignID != id || started.RunID == "" {
		t.Fatalf("start --json printed %q (%v)", r.Stdout, err)
	}

	t.Run("workflow input is the normalised spec", func(t *testing.T) {
		input := workflowInput(t, s.Client, id)
		var spec struct {
			Limits, Retry, Politeness map[string]any
		}
		if err := json.Unmarshal(input, &spec); err != nil {
			t.Fatalf("input %s: %v", input, err)
		}
		if spec.Limits["max_redirects"] != float64(campaign.DefaultMaxRedirects) ||
			spec.Retry["max_attempts"] != float64(campaign.DefaultMaxAttempts) ||
			spec.Politeness["user_agent"] != campaign.DefaultUserAgent ||
			spec.Politeness["min_delay"] != "500ms" {
			t.Errorf("workflow input is not the spec with its defaults: %s", input)
		}
	})

	t.Run("reweight right after start", func(t *testing.T) {
		// The campaign may not have read the registry yet: the CLI waits
		// for it to take the node rather than call it unknown.
		r := s.cli(t, "", "campaign", "reweight", id, s.NodeID("a"), "2", "--json")
		expect(t, r, exitOK)
		var out struct {
			Operation string              `json:"operation"`
			Node      campaign.NodeStatus `json:"node"`
		}
		if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil || out.Operation != campaign.Reweight ||
			out.Node.ID != s.NodeID("a") || out.Node.Override == nil || *out.Node.Override != 2 {
			t.Errorf("reweight --json printed %q (%v)", r.Stdout, err)
		}
	})

	t.Run("steering prints JSON", func(t *testing.T) {
		r := s.cli(t, "", "campaign", "pause", id, "--json")
		expect(t, r, exitOK)
		var out struct {
			CampaignID string          `json:"campaign_id"`
			Status     campaign.Status `json:"status"`
		}
		if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil || out.CampaignID != id || out.Status.State != "paused" {
			t.Errorf("pause --json printed %q (%v)", r.Stdout, err)
		}
		r = s.cli(t, "", "campaign", "drain", id, s.NodeID("b"), "--json")
		expect(t, r, exitOK)
		if !strings.Contains(r.Stdout, `"operation":"drain"`) || !strings.Contains(r.Stdout, `"state":"draining"`) &&
			!strings.Contains(r.Stdout, `"state":"drained"`) {
			t.Errorf("drain --json printed %q", r.Stdout)
		}
		r = s.cli(t, "", "campaign", "undrain", id, s.NodeID("b"), "--json")
		expect(t, r, exitOK)
		if !strings.Contains(r.Stdout, `"operation":"undrain"`) {
			t.Errorf("undrain --json printed %q", r.Stdout)
		}
		r = s.cli(t, "", "campaign", "status", id, "--json")
		expect(t, r, exitOK)
		var st campaign.Status
		if err := json.Unmarshal([]byte(r.Stdout), &st); err != nil || st.CampaignID != id || len(st.Nodes) != 3 {
			t.Errorf("status --json printed %q (%v)", r.Stdout, err)
		}
	})

	t.Run("unknown node lists the campaign's", func(t *testing.T) {
		r := s.cli(t, "", "campaign", "reweight", id, "ghost", "2")
		expect(t, r, exitNotFound, `node: unknown node "ghost" (campaign nodes: `+s.NodeID("a")+", "+s.NodeID("b")+", "+s.NodeID("c")+")")
	})

	t.Run("Ctrl-C in watch exits 0", func(t *testing.T) {
		w := startWatch(t, s, id)
		w.firstStatus(t)
		if err := w.cmd.Process.Signal(os.Interrupt); err != nil {
			t.Fatal(err)
		}
		r := w.wait(t)
		expect(t, r, exitOK, "stopped watching; campaign "+id+" goes on")
		if st, err := s.Campaigns.Status(bg, id); err != nil || st.State != "paused" {
			t.Errorf("after Ctrl-C in watch the campaign is %q (%v), want it still paused", st.State, err)
		}
	})

	t.Run("cancelled while watched exits 4", func(t *testing.T) {
		w := startWatch(t, s, id)
		w.firstStatus(t)
		r := s.cli(t, "", "campaign", "cancel", id, "--json")
		expect(t, r, exitOK)
		if !strings.Contains(r.Stdout, `"operation":"cancel"`) {
			t.Errorf("cancel --json printed %q", r.Stdout)
		}
		r = w.wait(t)
		expect(t, r, exitEnded, "campaign "+id)
		last := lastLine(r.Stdout)
		var line struct {
			CampaignID string `json:"campaign_id"`
			Error      string `json:"error"`
		}
		if err := json.Unmarshal([]byte(last), &line); err != nil || line.CampaignID != id || line.Error == "" {
			t.Errorf("watch --json ended with %q (%v), want an error line", last, err)
		}
		// Watching it again, ended, says the same at once.
		expect(t, s.cli(t, "", "campaign", "watch", id), exitEnded)
	})

	t.Run("failed campaign exits 4", func(t *testing.T) {
		// Only a workflow started around the CLI's validation can fail so.
		fid := "cli-failed-" + s.Name
		if _, err := s.Client.ExecuteWorkflow(bg, client.StartWorkflowOptions{ID: fid, TaskQueue: s.Config.ControlQueue},
			campaign.WorkflowType, map[string]any{"seeds": []string{"ftp://example.org/"}}); err != nil {
			t.Fatal(err)
		}
		expect(t, s.cli(t, "", "campaign", "watch", fid, "--plain"), exitEnded, "invalid campaign spec", "spec.seeds[0]")
	})

	t.Run("start --wait --json", func(t *testing.T) {
		wid := "cli-waited-" + s.Name
		spec := `{"seeds":["` + s.web.Seed() + `"],"limits":{"max_pages":20}}`
		r := s.cli(t, spec, "campaign", "start", "--spec", "-", "--id", wid, "--wait", "--json")
		expect(t, r, exitOK)
		var out struct {
			CampaignID string            `json:"campaign_id"`
			Summary    *campaign.Summary `json:"summary"`
		}
		if err := json.Unmarshal([]byte(r.Stdout), &out); err != nil || out.CampaignID != wid || out.Summary == nil ||
			out.Summary.Outcome != campaign.OutcomeCompleted || out.Summary.Fetched == 0 {
			t.Errorf("start --wait --json printed %q (%v)", r.Stdout, err)
		}
	})
}

// TestUnknownNodeNamesRegisteredNodes: before a campaign has any node (it
// has not read the registry, or, as here, the registry has none of those
// it is restricted to), a steering command naming an unknown node is
// answered with the live nodes registered, not "campaign nodes: none yet".
func TestUnknownNodeNamesRegisteredNodes(t *testing.T) {
	s := newStack(t)
	id := "cli-nodeless-" + s.Name
	spec := `{"seeds":["` + s.web.Seed() + `"],"nodes":["not-started-yet"]}`
	expect(t, s.cli(t, spec, "campaign", "start", "--spec", "-", "--id", id), exitOK)
	t.Cleanup(func() { _ = s.Campaigns.Cancel(bg, id) })
	want := `node: unknown node "ghost" (registered live nodes: ` + s.NodeID("a") + ", " + s.NodeID("b") + ", " + s.NodeID("c") + ")"
	r := s.cli(t, "", "campaign", "reweight", id, "ghost", "2")
	expect(t, r, exitNotFound, want)
	expect(t, s.cli(t, "", "campaign", "drain", id, "ghost"), exitNotFound, `node: unknown node "ghost" (registered live nodes: `)
}

// TestVersionPrintsLinkerStampOrVCSCommit: the linker's stamp (make build's
// -ldflags) is printed as given; without one, the commit comes from Go's
// VCS stamp.
func TestVersionPrintsLinkerStampOrVCSCommit(t *testing.T) {
	root, err := devstack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(bg, 10*time.Minute)
	defer cancel()
	build := func(flags ...string) string {
		bin := filepath.Join(t.TempDir(), "spiderpool")
		cmd := exec.CommandContext(ctx, "go", append(append([]string{"build"}, flags...), "-o", bin, "./cmd/spiderpool")...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %v: %v\n%s", flags, err, out)
		}
		return bin
	}
	type version struct{ Version, Commit, Go, Platform string }
	const commit = "0123456789abcdef0123456789abcdef01234567"
	bin := build("-ldflags", "-X main.version=v9.8.7-test -X main.commit="+commit)
	r := runBin(t, bin, "version", "--json")
	var v version
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &v) != nil || v.Version != "v9.8.7-test" || v.Commit != commit || v.Go == "" {
		t.Errorf("stamped version --json: exit %d, %q", r.Code, r.Stdout)
	}
	if r := runBin(t, bin, "version"); r.Code != 0 || !strings.HasPrefix(r.Stdout, "spiderpool v9.8.7-test (commit "+commit) {
		t.Errorf("stamped version: exit %d, %q", r.Code, r.Stdout)
	}

	if _, err := exec.LookPath("git"); err != nil {
		t.Skipf("no git to check the VCS stamp with: %v", err)
	}
	// -buildvcs=true: this machine's GOFLAGS turn the stamp off.
	bin = build("-buildvcs=true")
	info, err := exec.CommandContext(ctx, "go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	_, rev, ok := strings.Cut(string(info), "vcs.revision=")
	if !ok {
		t.Skipf("go build recorded no VCS stamp here (a git worktree?):\n%s", info)
	}
	rev, _, _ = strings.Cut(rev, "\n")
	r = runBin(t, bin, "version", "--json")
	v = version{}
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &v) != nil || v.Commit != rev {
		t.Fatalf("unstamped version --json: exit %d, %q; want commit %s, Go's VCS stamp", r.Code, r.Stdout, rev)
	}
	// The commit the binary was built from is this checkout's HEAD, or an
	// ancestor of it should a commit have landed since.
	if out, err := exec.CommandContext(ctx, "git", "-C", root, "merge-base", "--is-ancestor", v.Commit, "HEAD").CombinedOutput(); err != nil {
		t.Errorf("version says commit %s, not HEAD or before it: %v %s", v.Commit, err, out)
	}
}

// runBin runs a binary built by the test to its end, a minute at most.
func runBin(t *testing.T, bin string, args ...string) harness.CommandResult {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = cliEnv()
	return harness.RunCommand(t, time.Minute, cmd)
}

// watch is `campaign watch --json` running in the background.
type watch struct {
	cmd    *exec.Cmd
	lines  chan string
	out    strings.Builder
	errOut bytes.Buffer
	done   chan struct{}
}

func startWatch(t *testing.T, s *stack, id string) *watch {
	t.Helper()
	w := &watch{lines: make(chan string, 1024), done: make(chan struct{})}
	w.cmd = exec.Command(harness.Binary(t), append([]string{"campaign", "watch", id, "--json", "--every", "200ms"}, s.flags...)...)
	w.cmd.Env = cliEnv()
	w.cmd.Stderr = &w.errOut
	out, err := w.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.cmd.Process.Kill(); <-w.done })
	go func() {
		defer close(w.done)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			w.out.WriteString(sc.Text() + "\n")
			select {
			case w.lines <- sc.Text():
			default:
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	return w
}

// firstStatus waits for the watcher's first status line: it is connected
// and watching.
func (w *watch) firstStatus(t *testing.T) {
	t.Helper()
	select {
	case line := <-w.lines:
		if !strings.HasPrefix(line, `{"status":`) {
			t.Fatalf("watch --json's first line is %q, want a status", line)
		}
	case <-w.done:
		t.Fatalf("watch ended before reporting: stderr %q", w.errOut.String())
	case <-time.After(time.Minute):
		t.Fatal("watch reported nothing for a minute")
	}
}

func (w *watch) wait(t *testing.T) harness.CommandResult {
	t.Helper()
	select {
	case <-w.done:
	case <-time.After(time.Minute):
		t.Fatal("watch still running a minute later")
	}
	err := w.cmd.Wait()
	r := harness.CommandResult{Stdout: w.out.String(), Stderr: w.errOut.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.Code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			t.Fatalf("watch was killed by %v; stderr %q", ws.Signal(), r.Stderr)
		}
	} else if err != nil {
		t.Fatal(err)
	}
	return r
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// workflowInput is the input of the campaign's first run, as the Web UI
// shows it.
func workflowInput(t *testing.T, c client.Client, id string) []byte {
	t.Helper()
	it := c.GetWorkflowHistory(bg, id, "", false, 0)
	if !it.HasNext() {
		t.Fatalf("no history for %s", id)
	}
	ev, err := it.Next()
	if err != nil {
		t.Fatal(err)
	}
	payloads := ev.GetWorkflowExecutionStartedEventAttributes().GetInput().GetPayloads()
	if len(payloads) != 1 {
		t.Fatalf("first event %v has %d inputs", ev.GetEventType(), len(payloads))
	}
	return payloads[0].GetData()
}

// silentAddr is an address that takes connections and never answers: a
// loopback listener that accepts TCP and never writes a byte or closes a
// connection until the test ends.
func silentAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().String()
}

// closedAddr is a loopback port nothing listens on: connections to it are
// refused.
func closedAddr(t *testing.T) string {
	t.Helper()
	port, err := devstack.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return "127.0.0.1:" + strconv.Itoa(port)
}
