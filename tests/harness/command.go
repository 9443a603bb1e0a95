package harness

import (
	"bytes"
	"errors"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"
)

// CommandResult is how a command run to its end ended.
type CommandResult struct {
	Stdout, Stderr string
	Code           int // the exit code: 0 for success
	Took           time.Duration
}

// RunCommand runs cmd, as the caller prepared it (arguments, environment,
// standard input), to its end and says how it ended: a non-zero exit is a
// result, not a failure. Its output is collected unless the caller set
// Stdout or Stderr. A command that cannot start fails the test, and so
// does one still running after within, which is killed: a command that
// hangs fails where it hangs, not at go test's -timeout.
func RunCommand(t testing.TB, within time.Duration, cmd *exec.Cmd) CommandResult {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if cmd.Stdout == nil {
		cmd.Stdout = &stdout
	}
	if cmd.Stderr == nil {
		cmd.Stderr = &stderr
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", cmd, err)
	}
	var killed atomic.Bool
	deadline := time.AfterFunc(within, func() {
		killed.Store(true)
		_ = cmd.Process.Kill()
	})
	err := cmd.Wait()
	deadline.Stop()
	r := CommandResult{Stdout: stdout.String(), Stderr: stderr.String(), Took: time.Since(start)}
	if killed.Load() {
		t.Fatalf("%s: still running after %v: killed; stderr %q", cmd, within, r.Stderr)
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		r.Code = exit.ExitCode()
	} else if err != nil {
		t.Fatalf("%s: %v", cmd, err)
	}
	return r
}
