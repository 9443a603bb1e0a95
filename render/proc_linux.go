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
		// Chromium's helpers rewrite their title: their arguments are
		// one, spaces between.
		ours, renderer := false, false
		for _, arg := range bytes.FieldsFunc(cmdline, func(r rune) bool { return r == 0 || r == ' ' }) {
			ours = ours || bytes.Equal(arg, want)
			renderer = renderer || bytes.Equal(arg, []byte("--type=renderer"))
		}
		if ours {
			out = append(out, process{pid: pid, renderer: renderer})
		}
	}
	return out
}
