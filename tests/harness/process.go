package harness

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/devstack"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// Binary builds the spiderpool CLI once per test binary and returns its
// path.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "spiderpool-bin-")
		if err != nil {
			buildErr = err
			return
		}
		atExit(func() { _ = os.RemoveAll(dir) })
		root, err := devstack.RepoRoot()
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "spiderpool")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, "go", "build", "-o", binPath, filepath.Join(root, "cmd", "spiderpool")).CombinedOutput()
		if err != nil {
			buildErr = errors.New(string(out))
		}
	})
	if buildErr != nil {
		t.Fatalf("build spiderpool: %v", buildErr)
	}
	return binPath
}

// NodeProcess is a process of a stack (a node run as its own `spiderpool
// worker`, or a processor), to be stopped or killed for real.
type NodeProcess struct {
	ID string
	*devstack.Process
}

// StartNodeProcess runs `spiderpool worker` for this stack and waits until
// the node is registered. extra are more worker flags.
func (s *Stack) StartNodeProcess(short string, weight float64, extra ...string) *NodeProcess {
	s.t.Helper()
	id := s.NodeID(short)
	n, err := devstack.StartNode(devstack.NodeOptions{
		Binary: Binary(s.t), ID: id, Weight: weight,
		Flags: append([]string{"--heartbeat-interval", "1s", "--ttl", "4s", "--allow-private-networks",
			"--db-conns", "8", "--log-level", "info"}, extra...),
		Env:            s.env(nil),
		ProcessOptions: devstack.ProcessOptions{Log: s.logPath(id)},
	})
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { n.Kill() })
	if err := devstack.WaitRegistered(context.Background(), s.Store, time.Minute, n); err != nil {
		s.t.Fatalf("%v\n%s", err, n.Log())
	}
	return &NodeProcess{ID: id, Process: n.Process}
}

// StartCommand runs cmd as a process of this stack: with its database,
// Temporal and control queue in the environment (before cmd.Env), its
// output in a log, and killed when the test ends. It does not wait for
// anything.
func (s *Stack) StartCommand(name string, cmd *exec.Cmd) *NodeProcess {
	s.t.Helper()
	cmd.Env = s.env(cmd.Env).Environ()
	p, err := devstack.StartProcess(cmd, devstack.ProcessOptions{Log: s.logPath(name)})
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { p.Kill() })
	return &NodeProcess{ID: name, Process: p}
}

// env is where the stack's processes find it, extra added last.
func (s *Stack) env(extra []string) devstack.Env {
	return devstack.Env{DatabaseURL: s.Config.DatabaseURL, TemporalAddress: s.Config.TemporalAddress,
		ControlQueue: s.Config.ControlQueue, Extra: extra}
}

// logPath is where the process named name writes its log.
func (s *Stack) logPath(name string) string { return filepath.Join(s.t.TempDir(), name+".log") }
