//go:build linux

package render

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"syscall"
)

// dieWithUs makes the kernel kill Chromium when the thread that started
// it ends (chromedp starts it from a goroutine locked to its thread until
// the browser exits), so a node that dies leaves no browser behind.
func dieWithUs(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = new(syscall.SysProcAttr)
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}

// killLeftovers kills every process started with --user-data-dir=dir:
// Chromium's helpers (zygote, renderers, the network service) can outlive
// the main process. It returns how many it found.
func killLeftovers(dir string) int {
	procs := processesOf(dir)
	for _, p := range procs {
		syscall.Kill(p.pid, syscall.SIGKILL)
	}
	return len(procs)
}

// process is one of a Chromium's processes.
type process struct {
	pid      int
	renderer bool // --type=renderer: it runs a page's scripts
}

// hasArg says whether cmdline (/proc/PID/cmdline) holds arg whole.
// Chromium's helpers rewrite their title: their arguments are then one,
// spaces between, so an argument ends at a NUL or a space, and is matched
// as a whole rather than split (a profile's path may hold a space).
func hasArg(cmdline, arg []byte) bool {
	edge := func(i int) bool { return i < 0 || i >= len(cmdline) || cmdline[i] == 0 || cmdline[i] == ' ' }
	for from := 0; ; {
		i := bytes.Index(cmdline[from:], arg)
		if i < 0 {
			return false
		}
		start := from + i
		if edge(start-1) && edge(start+len(arg)) {
			return true
		}
		from = start + 1
	}
}

// processesOf lists the processes started with --user-data-dir=dir.
func processesOf(dir string) []process {
	want := []byte("--user-data-dir=" + dir)
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []process
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		if hasArg(cmdline, want) {
			out = append(out, process{pid: pid, renderer: hasArg(cmdline, []byte("--type=renderer"))})
		}
	}
	return out
}
