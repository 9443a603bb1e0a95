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
	want := []byte("--user-data-dir=" + dir)
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		for arg := range bytes.SplitSeq(cmdline, []byte{0}) {
			if bytes.Equal(arg, want) {
				syscall.Kill(pid, syscall.SIGKILL)
				n++
				break
			}
		}
	}
	return n
}
