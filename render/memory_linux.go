//go:build linux

package render

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// renderersOver lists the renderers of the Chromium of profile dir whose
// resident memory is over limit bytes, with it.
func renderersOver(dir string, limit int64) map[int]int64 {
	over := map[int]int64{}
	for _, p := range processesOf(dir) {
		if !p.renderer {
			continue
		}
		if rss := residentMemory(p.pid); rss > limit {
			over[p.pid] = rss
		}
	}
	return over
}

// residentMemory is a process's resident set in bytes (/proc/PID/statm,
// its second field, in pages); 0 when it is gone.
func residentMemory(pid int) int64 {
	statm, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm")
	if err != nil {
		return 0
	}
	fields := bytes.Fields(statm)
	if len(fields) < 2 {
		return 0
	}
	pages, err := strconv.ParseInt(string(fields[1]), 10, 64)
	if err != nil {
		return 0
	}
	return pages * int64(os.Getpagesize())
}

func killProcess(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }
