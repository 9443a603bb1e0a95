package devstack

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ProcessOptions say where a child process's output goes and what it gets
// when this process dies.
type ProcessOptions struct {
	// Log is a file the process's output (stdout and stderr) is written
	// to, created or truncated. Empty sends it to Output.
	Log string
	// Output receives the process's output when Log is empty; nil
	// discards it.
	Output io.Writer
	// ParentDeath is the signal the process gets when this one dies, even
	// by SIGKILL (Linux only, see DieWithParent); 0 is SIGKILL.
	ParentDeath syscall.Signal
}

// Process is a child process started by StartProcess, to be stopped
// cleanly or killed as a crash would kill it.
type Process struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error // what cmd.Wait returned, once done is closed
}

// StopGrace is how long Stop and Kill wait for a process to exit before
// they kill it. A node stops within its own stop timeout (45 s), so only
// a hung one is killed.
const StopGrace = time.Minute

// StartProcess starts cmd with its output and parent-death signal as o
// says, and watches for its exit. It does not wait for anything else.
func StartProcess(cmd *exec.Cmd, o ProcessOptions) (*Process, error) {
	p := &Process{cmd: cmd, log: o.Log, done: make(chan struct{})}
	var logFile *os.File
	switch {
	case o.Log != "":
		f, err := os.Create(o.Log)
		if err != nil {
			return nil, err
		}
		logFile = f
		cmd.Stdout, cmd.Stderr = f, f
	case o.Output != nil:
		cmd.Stdout, cmd.Stderr = o.Output, o.Output
	}
	sig := o.ParentDeath
	if sig == 0 {
		sig = syscall.SIGKILL
	}
	DieWithParent(cmd, sig)
	if err := cmd.Start(); err != nil {
		if logFile != nil {
			logFile.Close()
		}
		return nil, err
	}
	go func() {
		p.err = cmd.Wait()
		if logFile != nil {
			logFile.Close()
		}
		close(p.done)
	}()
	return p, nil
}

// PID is the process ID.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Exited is closed once the process has exited; Err then says how.
func (p *Process) Exited() <-chan struct{} { return p.done }

// Err is how the process exited (exec.Cmd.Wait's error), or nil while it
// runs.
func (p *Process) Err() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

// Log is what the process wrote to its log file so far ("" without one).
func (p *Process) Log() string {
	if p.log == "" {
		return ""
	}
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// PeakRSS is the process's peak resident set, in bytes.
func (p *Process) PeakRSS() (int64, error) { return PeakRSS(p.PID()) }

// Signal sends sig and does not wait.
func (p *Process) Signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }

// Stop sends SIGTERM (for a node, a clean stop: its unfetched URLs go
// back) and waits until the process has exited, killing it after
// StopGrace.
func (p *Process) Stop() error { return p.signalAndWait(syscall.SIGTERM) }

// Kill sends SIGKILL, as a crash would, and waits until the process has
// exited.
func (p *Process) Kill() error { return p.signalAndWait(syscall.SIGKILL) }

func (p *Process) signalAndWait(sig syscall.Signal) error {
	select {
	case <-p.done:
		return nil // already gone
	default:
	}
	if err := p.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal pid %d: %w", p.PID(), err)
	}
	select {
	case <-p.done:
	case <-time.After(StopGrace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	return nil
}

// PeakRSS is process pid's peak resident set (VmHWM in /proc), in bytes.
func PeakRSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
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
