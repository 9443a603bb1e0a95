package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/control"
	"github.com/spiderpool/spiderpool/devstack"
	"github.com/spiderpool/spiderpool/store"
	"github.com/spiderpool/spiderpool/tests/harness"
	"github.com/spiderpool/spiderpool/tests/synthweb"
)

// spiderpoolBin is the CLI, built once.
func spiderpoolBin(t *testing.T) string { return harness.Binary(t) }

type result struct {
	stdout, stderr string
	code           int
	took           time.Duration
	killed         bool // by runCmdWithin's deadline
}

func runCmd(t *testing.T, stdin string, name string, args ...string) result {
	t.Helper()
	return runCmdWithin(t, 2*time.Minute, stdin, name, args...)
}

// runCmdWithin runs a command, killing it if it is still running after
// within (result.killed says so).
func runCmdWithin(t *testing.T, within time.Duration, stdin string, name string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(bg, within)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr, cmd.Stdin = &out, &errb, strings.NewReader(stdin)
	cmd.Env = append(os.Environ(), "DATABASE_URL=", "TEMPORAL_ADDRESS=")
	start := time.Now()
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String(), took: time.Since(start), killed: ctx.Err() != nil}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return r
}

func temporalCLI(t *testing.T) string {
	t.Helper()
	bin, err := devstack.FindTemporalBin()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// TestTemporalCLIStartsCampaignWithDefaults is acceptance 6: the Temporal
// CLI starts a working campaign from seeds alone, and the status query
// answers through it too.
func TestTemporalCLIStartsCampaignWithDefaults(t *testing.T) {
	web := harness.StartWeb(t, synthweb.Config{Hosts: 4, Pages: 200, LinksPerPage: 4, CrossHostFraction: 0.3, Seed: 3})
	s := harness.NewStack(t)
	s.StartNode("a", 1)
	s.StartNode("b", 1)
	tcli := temporalCLI(t)
	addr := harness.Temporal(t).Address()
	id := "tcli-" + s.Name
	r := runCmd(t, "", tcli, "workflow", "start", "--address", addr, "--type", campaign.WorkflowType,
		"--task-queue", s.Config.ControlQueue, "--workflow-id", id, "--input", `{"seeds":["`+web.Seed()+`"]}`)
	if r.code != 0 {
		t.Fatalf("temporal workflow start: %s %s", r.stdout, r.stderr)
	}
	q := runCmd(t, "", tcli, "workflow", "query", "--address", addr, "--workflow-id", id, "--type", campaign.StatusQuery, "-o", "json")
	if q.code != 0 {
		t.Fatalf("temporal workflow query: %s %s", q.stdout, q.stderr)
	}
	var answer struct {
		QueryResult []campaign.Status `json:"queryResult"`
	}
	if err := json.Unmarshal([]byte(q.stdout), &answer); err != nil || len(answer.QueryResult) != 1 || answer.QueryResult[0].CampaignID != id {
		t.Fatalf("query output %q (%v)", q.stdout, err)
	}
	sum, err := s.Campaigns.Result(bounded(t, 2*time.Minute), id)
	if err != nil {
		t.Fatal(err)
	}
	// Default scope is the seed's host: all of host 0, nothing else.
	host0 := 0
	for _, p := range web.Pages() {
		if strings.HasPrefix(p, "http://"+web.Hosts()[0]+"/") {
			host0++
		}
	}
	if sum.Fetched != int64(host0) || sum.Failed != 0 {
		t.Fatalf("summary %+v, want the %d pages of the seed host", sum, host0)
	}
	harness.RecordHistory(t, s.Client, id, "temporal_cli_defaults")
	t.Logf("started by the Temporal CLI with defaults: %d pages fetched; status answered run %d state %q",
		sum.Fetched, answer.QueryResult[0].Run, answer.QueryResult[0].State)
}

// TestBadInputIsNamedAndHarmless is acceptance 7: bad specs and signals
// get errors naming the field, a running campaign is unharmed, and without
// Postgres or Temporal commands fail fast saying which and where.
func TestBadInputIsNamedAndHarmless(t *testing.T) {
	bin := spiderpoolBin(t)
	s := harness.NewStack(t)
	addr := harness.Temporal(t).Address()
	common := []string{"--temporal-address", addr, "--database-url", s.Config.DatabaseURL, "--control-queue", s.Config.ControlQueue}

	for _, tc := range []struct{ spec, field, problem string }{
		{`{"seeds":[]}`, "spec.seeds", "at least one seed URL is required"},
		{`{"seeds":["ftp://example.org/"]}`, "spec.seeds[0]", "is not an http(s) URL"},
		{`{"seeds":["http://127.0.0.1:1/"],"limits":{"max_pages":-5}}`, "spec.limits.max_pages", "must be >= 0, got -5"},
		{`{"seeds":["http://127.0.0.1:1/"],"limit":{}}`, "spec", `unknown field "limit"`},
	} {
		r := runCmd(t, tc.spec, bin, append([]string{"campaign", "start", "--spec", "-", "--id", "bad-" + s.Name}, common...)...)
		if r.code == 0 || !strings.Contains(r.stderr, tc.field+": ") || !strings.Contains(r.stderr, tc.problem) {
			t.Errorf("spec %s: exit %d, stderr %q; want an error naming %s", tc.spec, r.code, r.stderr, tc.field)
		}
	}
	if _, err := s.Campaigns.Status(bg, "bad-"+s.Name); err == nil {
		t.Error("a refused spec started a campaign")
	}

	// The same specs through the Temporal CLI, which has no validation of
	// its own: the workflow fails at once, naming the fields.
	tcli := temporalCLI(t)
	for i, tc := range []struct{ spec, want string }{
		{`{}`, "spec.seeds: at least one seed URL is required"},
		{`{"seeds":["mailto:x@y.z"],"limits":{"max_pages":-1}}`, "spec.limits.max_pages: must be >= 0"},
	} {
		id := "bad-tcli-" + strconv.Itoa(i) + "-" + s.Name
		r := runCmd(t, "", tcli, "workflow", "start", "--address", addr, "--type", campaign.WorkflowType,
			"--task-queue", s.Config.ControlQueue, "--workflow-id", id, "--input", tc.spec)
		if r.code != 0 {
			t.Fatalf("temporal workflow start: %s", r.stderr)
		}
		s.StartNode("n"+strconv.Itoa(i), 1) // a worker to run it
		_, err := s.Campaigns.Result(bounded(t, time.Minute), id)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("workflow with spec %s ended with %v, want %q", tc.spec, err, tc.want)
		}
	}

	// A running campaign shrugs off a bad signal.
	web := harness.StartWeb(t, synthweb.Config{Hosts: 3, Pages: 150, LinksPerPage: 4, CrossHostFraction: 0.5, Seed: 5})
	id := "steady-" + s.Name
	spec := loopbackSpec(web)
	spec.Politeness = campaign.Politeness{MinDelay: campaign.Duration(20 * time.Millisecond), MaxConcurrencyPerHost: 1}
	running, err := s.Campaigns.Start(bg, id, spec)
	if err != nil {
		t.Fatal(err)
	}
	waitFetched(t, s, id, 5)
	// Paused from the CLI (so it cannot end while bad signals arrive): the
	// workflow says paused, and its search attribute too.
	if r := runCmd(t, "", bin, append([]string{"campaign", "pause", id}, common...)...); r.code != 0 {
		t.Fatalf("campaign pause: exit %d, stderr %q", r.code, r.stderr)
	}
	if st, err := s.Campaigns.Status(bg, id); err != nil || st.State != "paused" {
		t.Fatalf("after pause: state %q, err %v", st.State, err)
	}
	harness.Eventually(t, time.Minute, "CampaignStatus=Paused in visibility", func() bool {
		list, err := s.Campaigns.List(bg, campaign.StatusPaused, 10)
		return err == nil && len(list) == 1 && list[0].ID == id
	})
	r := runCmd(t, "", bin, append([]string{"campaign", "reweight", id, "ghost", "2"}, common...)...)
	if r.code == 0 || !strings.Contains(r.stderr, `node: unknown node "ghost"`) {
		t.Errorf("reweight of an unknown node: exit %d, stderr %q", r.code, r.stderr)
	}
	r = runCmd(t, "", bin, append(append([]string{"campaign", "reweight"}, common...), id, s.NodeID("n0"), "--", "-3")...)
	if r.code == 0 || !strings.Contains(r.stderr, "weight: weight must be a finite number >= 0, got -3") {
		t.Errorf("negative weight: exit %d, stderr %q", r.code, r.stderr)
	}
	r = runCmd(t, "", tcli, "workflow", "signal", "--address", addr, "--workflow-id", id, "--name", campaign.Drain, "--input", `{"node":"ghost"}`)
	if r.code != 0 {
		t.Fatalf("temporal workflow signal: %s", r.stderr)
	}
	harness.Eventually(t, time.Minute, "the rejected signal to show in status", func() bool {
		st, err := s.Campaigns.Status(bg, id)
		return err == nil && len(st.Rejected) == 1 && strings.Contains(st.Rejected[0], `unknown node "ghost"`)
	})
	if r := runCmd(t, "", bin, append([]string{"campaign", "resume", id}, common...)...); r.code != 0 {
		t.Fatalf("campaign resume: exit %d, stderr %q", r.code, r.stderr)
	}
	ctx, cancel := context.WithTimeout(bg, 2*time.Minute)
	defer cancel()
	var sum campaign.Summary
	if err := running.Get(ctx, &sum); err != nil {
		t.Fatal(err)
	}
	assertExactlyOnce(t, s, web, sum)

	// The finished campaign is found by its search attributes, from the
	// Temporal CLI as from ours, with its final page count.
	harness.Eventually(t, time.Minute, "CampaignStatus=Completed in visibility", func() bool {
		r := runCmd(t, "", tcli, "workflow", "list", "--address", addr, "-o", "json",
			"--query", fmt.Sprintf(`CampaignStatus="Completed" AND WorkflowId=%q`, id))
		return r.code == 0 && strings.Contains(r.stdout, id)
	})
	r = runCmd(t, "", bin, append([]string{"campaign", "list", "--status", "Completed", "--json"}, common...)...)
	var listed []control.CampaignInfo
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &listed) != nil {
		t.Fatalf("campaign list: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	found := false
	for _, c := range listed {
		if c.ID == id {
			found = true
			if c.Fetched == nil || *c.Fetched != sum.Fetched {
				t.Errorf("list says %s fetched %v, summary %d", id, c.Fetched, sum.Fetched)
			}
		}
	}
	if !found {
		t.Errorf("campaign list --status Completed does not list %s: %s", id, r.stdout)
	}

	// Export writes one record per fetched page.
	r = runCmd(t, "", bin, append([]string{"campaign", "export", id}, common...)...)
	if r.code != 0 {
		t.Fatalf("campaign export: exit %d, stderr %q", r.code, r.stderr)
	}
	urls := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var rec store.PageRecord
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("export line %q: %v", line, err)
		}
		if rec.State != "fetched" || rec.Status == 0 || rec.FetchedAt == nil || urls[rec.URL] {
			t.Errorf("export record %+v: want a fetched page, once", rec)
		}
		urls[rec.URL] = true
	}
	if int64(len(urls)) != sum.Fetched {
		t.Errorf("export wrote %d pages, campaign fetched %d", len(urls), sum.Fetched)
	}
}

// TestCommandsFailFastWithoutServers is acceptance 7's other half: with
// Postgres or Temporal out of reach, a command gives up by itself within
// its connect timeout (5s by default) and says what it tried to reach. Out
// of reach comes in four kinds, each proving something else:
//   - refused: a closed port; the error must name the address.
//   - mute: a listener that accepts TCP and never says a word; proves the
//     protocol steps (gRPC's handshake, Postgres's startup) are bounded,
//     not only the TCP connect.
//   - dropping: a listener whose accept queue is full, so the kernel drops
//     every SYN; proves the TCP connect itself is bounded, as against a
//     firewalled host.
//   - TEST-NET-1 (192.0.2.1): an address no server has. On most networks
//     its packets vanish (a blackhole); on one that routes it somewhere
//     (a gateway refusing, a proxy answering nonsense) it proves only that
//     whatever comes back ends in an error naming the address.
//
// The deadline is a bound on the wait, a dozen connect timeouts: a command
// that hangs is killed there and fails the test; no speed is asserted.
func TestCommandsFailFastWithoutServers(t *testing.T) {
	bin := spiderpoolBin(t)
	closed, err := devstack.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	refused := "127.0.0.1:" + strconv.Itoa(closed)
	mute := muteListener(t)
	dropping := droppingListener(t)
	const blackhole = "192.0.2.1"
	pg := func(hostport string) string {
		return "postgres://spiderpool@" + hostport + "/spiderpool?sslmode=disable"
	}
	s := harness.NewStack(t) // a live Postgres, to show the Temporal check on its own
	type tc struct {
		name  string
		args  []string
		wants []string
	}
	cases := []tc{
		{"worker without postgres", []string{"worker", "--node", "x", "--database-url", pg(refused)},
			[]string{"cannot reach Postgres at " + refused, "from --flag"}},
		{"worker without temporal", []string{"worker", "--node", "x", "--database-url", s.Config.DatabaseURL, "--temporal-address", refused},
			[]string{"cannot reach Temporal at " + refused}},
		{"worker with a mute temporal", []string{"worker", "--node", "x", "--database-url", s.Config.DatabaseURL, "--temporal-address", mute},
			[]string{"cannot reach Temporal at " + mute, "no answer within 5s (--connect-timeout)"}},
	}
	for _, where := range []struct{ kind, addr string }{
		{"refused", refused}, {"mute", mute}, {"dropping", dropping}, {"TEST-NET", blackhole + ":5432"},
	} {
		cases = append(cases, tc{"migrate, postgres " + where.kind, []string{"migrate", "--database-url", pg(where.addr)},
			[]string{"cannot reach Postgres at " + where.addr}})
	}
	for _, where := range []struct{ kind, addr string }{
		{"refused", refused}, {"mute", mute}, {"dropping", dropping}, {"TEST-NET", blackhole + ":7233"},
	} {
		wants := []string{"cannot reach Temporal at " + where.addr, "namespace default"}
		if where.kind == "mute" || where.kind == "dropping" {
			wants = append(wants, "no answer within 5s (--connect-timeout)")
		}
		cases = append(cases, tc{"status, temporal " + where.kind, []string{"campaign", "status", "any", "--temporal-address", where.addr}, wants})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel() // each mostly waits out its connect timeout
			r := runCmdWithin(t, time.Minute, "", bin, c.args...)
			if r.killed {
				t.Fatalf("still running after %v: killed; stderr %q", time.Minute, r.stderr)
			}
			if r.code == 0 {
				t.Errorf("exit 0")
			}
			for _, w := range c.wants {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr %q lacks %q", r.stderr, w)
				}
			}
			// The figure goes in the report.
			t.Logf("failed in %v: %s", r.took.Round(time.Millisecond), strings.TrimSpace(r.stderr))
		})
	}
}

// muteListener accepts TCP connections on loopback and never writes a byte
// or closes one until the test ends.
func muteListener(t *testing.T) string {
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

// droppingListener is a loopback port whose SYNs the kernel drops: a
// socket listening with a backlog of 0 that never accepts, its queue
// filled by one connection. Linux drops a SYN to a listener whose accept
// queue is full instead of refusing it, so a connect there hangs as one to
// a blackholed host does. The probe checks that it does.
func droppingListener(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(sa.(*syscall.SockaddrInet4).Port)
	filler, err := net.DialTimeout("tcp4", addr, 10*time.Second)
	if err != nil {
		t.Fatalf("fill the accept queue of %s: %v", addr, err)
	}
	t.Cleanup(func() { filler.Close() })
	probe, err := net.DialTimeout("tcp4", addr, time.Second)
	var ne net.Error
	if err == nil {
		probe.Close()
		t.Fatalf("%s accepted a second connection: it does not drop SYNs here, so the test would prove nothing", addr)
	} else if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("probe of %s: %v; want a connect that times out", addr, err)
	}
	return addr
}
