package harness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/config"
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

// NodeProcess is a node run as its own `spiderpool worker` process, to be
// stopped or killed for real.
type NodeProcess struct {
	ID   string
	cmd  *exec.Cmd
	done chan error
	log  string
}

// StartNodeProcess runs `spiderpool worker` for this stack and waits until
// the node is registered. extra are more worker flags.
func (s *Stack) StartNodeProcess(short string, weight float64, extra ...string) *NodeProcess {
	s.t.Helper()
	id := s.NodeID(short)
	args := append([]string{"worker", "--node", id, "--weight", strconv.FormatFloat(weight, 'g', -1, 64),
		"--heartbeat-interval", "1s", "--ttl", "4s", "--allow-private-networks", "--db-conns", "8", "--log-level", "info"}, extra...)
	p := s.StartCommand(id, exec.Command(Binary(s.t), args...))
	Eventually(s.t, time.Minute, "node "+id+" to register", func() bool {
		p.mustRun(s.t)
		nodes, err := s.Store.Nodes(context.Background(), []string{id})
		return err == nil && len(nodes) == 1 && nodes[0].Alive
	})
	return p
}

// StartCommand runs cmd as a process of this stack: with its database,
// Temporal and control queue in the environment, its output in a log, and
// killed when the test ends. It does not wait for anything.
func (s *Stack) StartCommand(name string, cmd *exec.Cmd) *NodeProcess {
	s.t.Helper()
	logPath := filepath.Join(s.t.TempDir(), name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		s.t.Fatal(err)
	}
	cmd.Env = append(append(os.Environ(),
		config.EnvDatabaseURL+"="+s.Config.DatabaseURL,
		config.EnvTemporalAddress+"="+s.Config.TemporalAddress,
		config.EnvControlQueue+"="+s.Config.ControlQueue), cmd.Env...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	devstack.DieWithParent(cmd, syscall.SIGKILL)
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	p := &NodeProcess{ID: name, cmd: cmd, done: make(chan error, 1), log: logPath}
	go func() { p.done <- cmd.Wait(); logFile.Close() }()
	s.t.Cleanup(func() { p.Kill() })
	return p
}

// mustRun fails the test if the process has exited.
func (p *NodeProcess) mustRun(t testing.TB) {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err
		t.Fatalf("%s exited: %v\n%s", p.ID, err, p.Log())
	default:
	}
}

// PID is the process ID.
func (p *NodeProcess) PID() int { return p.cmd.Process.Pid }

// Log returns what the node wrote.
func (p *NodeProcess) Log() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// PeakRSS is the process's peak resident set (VmHWM), in bytes.
func (p *NodeProcess) PeakRSS() (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.PID()))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmHWM in /proc status")
}

// Stop sends SIGTERM (a clean stop: unfetched URLs go back) and waits.
func (p *NodeProcess) Stop() error { return p.signal(syscall.SIGTERM) }

// Kill sends SIGKILL, as a crash would, and waits.
func (p *NodeProcess) Kill() error { return p.signal(syscall.SIGKILL) }

func (p *NodeProcess) signal(sig syscall.Signal) error {
	select {
	case err := <-p.done:
		p.done <- err
		return nil // already gone
	default:
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case err := <-p.done:
		p.done <- err
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
	}
	return nil
}
