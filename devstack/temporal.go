package devstack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"

	"github.com/spiderpool/spiderpool/campaign"
)

// TemporalCLIVersion is the CLI whose dev server spiderpool develops and
// tests against; `make tools` installs it into ./bin.
const TemporalCLIVersion = "v1.5.1"

// TemporalOptions configure a dev server.
type TemporalOptions struct {
	// Bin is the temporal CLI; empty finds it (see FindTemporalBin).
	Bin string
	// Port is the frontend gRPC port on 127.0.0.1; 0 picks a free one.
	Port int
	// UIPort serves the Web UI; 0 picks a free one, -1 disables the UI.
	UIPort int
	// DBFile persists workflows across restarts; empty keeps them in memory.
	DBFile string
	// Output receives the server's log; nil discards it.
	Output io.Writer
}

// Temporal is a running dev server.
type Temporal struct {
	opts TemporalOptions
	cmd  *exec.Cmd
	done chan error
}

// FindTemporalBin returns the temporal CLI: $SPIDERPOOL_TEMPORAL_BIN, else
// ./bin/temporal in the repository, else temporal in PATH.
func FindTemporalBin() (string, error) {
	if p := os.Getenv("SPIDERPOOL_TEMPORAL_BIN"); p != "" {
		return p, nil
	}
	if root, err := RepoRoot(); err == nil {
		p := filepath.Join(root, "bin", "temporal")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("temporal"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("temporal CLI not found: run `make tools` (go install github.com/temporalio/cli/cmd/temporal@%s into ./bin)", TemporalCLIVersion)
}

// StartTemporal starts `temporal server start-dev` and waits until its
// frontend answers.
func StartTemporal(ctx context.Context, opts TemporalOptions) (*Temporal, error) {
	var err error
	if opts.Bin == "" {
		if opts.Bin, err = FindTemporalBin(); err != nil {
			return nil, err
		}
	}
	if opts.Port == 0 {
		if opts.Port, err = FreePort(); err != nil {
			return nil, err
		}
	}
	if opts.UIPort == 0 {
		if opts.UIPort, err = FreePort(); err != nil {
			return nil, err
		}
	}
	if opts.Output == nil {
		opts.Output = io.Discard
	}
	t := &Temporal{opts: opts}
	return t, t.start(ctx)
}

// startAttempts bounds how often start tries again after the server died
// while starting. The dev server picks its history, matching and worker
// ports itself, and one of them can be taken by the time it listens; it then
// logs the failure and panics (exit status 2). A second start picks again.
const startAttempts = 3

func (t *Temporal) start(ctx context.Context) error {
	var err error
	for attempt := 1; attempt <= startAttempts; attempt++ {
		var died *diedStarting
		if err = t.startOnce(ctx); !errors.As(err, &died) {
			return err
		}
		err = fmt.Errorf("%w (attempt %d of %d)", err, attempt, startAttempts)
	}
	return err
}

func (t *Temporal) startOnce(ctx context.Context) error {
	httpPort, err := FreePort()
	if err != nil {
		return err
	}
	args := []string{"server", "start-dev", "--ip", "127.0.0.1", "--port", strconv.Itoa(t.opts.Port),
		"--http-port", strconv.Itoa(httpPort), "--log-level", "warn", "--namespace", "default",
		// One shard serialises everything; these keep it from also
		// throttling a crawl that batches well.
		"--dynamic-config-value", "frontend.namespaceRPS=100000",
		"--dynamic-config-value", "frontend.namespaceBurstRatio=2",
		"--dynamic-config-value", "history.persistenceMaxQPS=100000",
		"--dynamic-config-value", "matching.numTaskqueueReadPartitions=1",
		"--dynamic-config-value", "matching.numTaskqueueWritePartitions=1",
	}
	// Registered at start, so the campaign workflow can upsert them.
	for _, name := range slices.Sorted(maps.Keys(campaign.SearchAttributeTypes)) {
		args = append(args, "--search-attribute", name+"="+campaign.SearchAttributeTypes[name])
	}
	if t.opts.UIPort < 0 {
		args = append(args, "--headless")
	} else {
		args = append(args, "--ui-port", strconv.Itoa(t.opts.UIPort))
	}
	if t.opts.DBFile != "" {
		args = append(args, "--db-filename", t.opts.DBFile)
	}
	cmd := exec.Command(t.opts.Bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	DieWithParent(cmd, syscall.SIGKILL)
	head := &headWriter{max: 16 << 10}
	out := io.MultiWriter(t.opts.Output, head)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start temporal dev server (%s): %w", t.opts.Bin, err)
	}
	t.cmd = cmd
	t.done = make(chan error, 1)
	go func() { t.done <- cmd.Wait() }()
	var died *diedStarting
	if err = t.waitReady(ctx); errors.As(err, &died) {
		t.cmd = nil
		died.said = head.failures()
	}
	return err
}

// diedStarting is a dev server that exited before it answered.
type diedStarting struct {
	port int
	exit error
	said string // the lines of its output that say why, if any
}

func (e *diedStarting) Error() string {
	msg := fmt.Sprintf("temporal dev server on port %d exited during start-up: %v", e.port, e.exit)
	if e.said == "" {
		return msg + " (is the port free?)"
	}
	return msg + "; it said: " + e.said
}

func (t *Temporal) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(90 * time.Second)
	for {
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		c, err := client.DialContext(dctx, client.Options{HostPort: t.Address(), Logger: log.NewStructuredLogger(quiet)})
		if err == nil {
			_, err = c.WorkflowService().DescribeNamespace(dctx, &workflowservice.DescribeNamespaceRequest{Namespace: "default"})
			c.Close()
		}
		cancel()
		if err == nil {
			return nil
		}
		select {
		case werr := <-t.done:
			return &diedStarting{port: t.opts.Port, exit: werr}
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("temporal dev server on port %d not ready after 90s: %w", t.opts.Port, err)
		}
	}
}

// headWriter keeps the first max bytes written to it: a server that dies
// while starting says why near the top (an error line, then a panic).
type headWriter struct {
	mu  sync.Mutex
	max int
	buf bytes.Buffer
}

func (h *headWriter) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if room := h.max - h.buf.Len(); room > 0 {
		h.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// failures is the error and panic lines, at most five, joined by " | ";
// without any, the last line written. (The CLI logs its errors at level
// ERROR once its logger is set up, and prints them bare before that;
// PgBouncer writes " ERROR " and " FATAL " after the time and pid.)
func (h *headWriter) failures() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var lines []string
	last := ""
	for line := range strings.Lines(h.buf.String()) {
		line = strings.TrimSpace(line)
		if line != "" {
			last = line
		}
		if strings.Contains(line, "level=ERROR") || strings.HasPrefix(line, "panic:") ||
			strings.Contains(line, "] ERROR ") || strings.Contains(line, "] FATAL ") {
			lines = append(lines, line)
		}
		if len(lines) == 5 {
			break
		}
	}
	if len(lines) == 0 {
		return last
	}
	return strings.Join(lines, " | ")
}

var quiet = slog.New(slog.DiscardHandler)

// Address is the frontend host:port.
func (t *Temporal) Address() string { return "127.0.0.1:" + strconv.Itoa(t.opts.Port) }

// UIAddress is the Web UI URL, or "" when headless.
func (t *Temporal) UIAddress() string {
	if t.opts.UIPort < 0 {
		return ""
	}
	return "http://127.0.0.1:" + strconv.Itoa(t.opts.UIPort)
}

// Stop terminates the server and waits for it.
func (t *Temporal) Stop() error { return t.signal(syscall.SIGTERM) }

// Kill kills the server at once, as a crash would.
func (t *Temporal) Kill() error { return t.signal(syscall.SIGKILL) }

func (t *Temporal) signal(sig syscall.Signal) error {
	if t.cmd == nil {
		return nil
	}
	_ = syscall.Kill(-t.cmd.Process.Pid, sig)
	select {
	case <-t.done:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-t.cmd.Process.Pid, syscall.SIGKILL)
		<-t.done
	}
	t.cmd = nil
	return nil
}

// Restart starts the server again on the same ports and db file.
func (t *Temporal) Restart(ctx context.Context) error {
	if t.cmd != nil {
		return errors.New("temporal dev server is still running")
	}
	return t.start(ctx)
}
