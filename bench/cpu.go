package main

import (
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
)

// cpuSample is CPU time so far, in seconds: the whole machine's busy time,
// and what this process and its descendants (the web, Postgres, Temporal,
// the nodes) used. Between two samples, busy time the bench did not use is
// other processes': on a shared machine, the load that makes a run's
// figures worse than the code's.
type cpuSample struct {
	machine, ours float64
	// byChild is ours by the bench's child it was spent under, named by
	// its command (postgres, temporal, spiderpool: the nodes), and "bench"
	// for the bench itself (the web, Colly, the no-op processor).
	byChild map[string]float64
}

// clockTicks is USER_HZ, the unit of /proc's CPU times: 100 on every Linux
// Go runs on.
const clockTicks = 100

func sampleCPU() cpuSample {
	var s cpuSample
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal ...
		for i, v := range f[1:] {
			if i == 3 || i == 4 || i >= 8 { // idle, iowait; guest time is in user already
				continue
			}
			n, _ := strconv.ParseFloat(v, 64)
			s.machine += n / clockTicks
		}
	}
	parent := map[int]int{}
	spent := map[int]float64{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, cpu, ok := procStat(pid); ok {
			parent[pid], spent[pid] = ppid, cpu
		}
	}
	self := os.Getpid()
	s.byChild = map[string]float64{}
	for pid, cpu := range spent {
		for p, below := pid, 0; p > 1; below, p = p, parent[p] {
			if p == self {
				s.ours += cpu
				name := "bench"
				if below != 0 {
					name = command(below)
				}
				s.byChild[name] += cpu
				break
			}
		}
	}
	return s
}

// command is a process's command name, as /proc/PID/comm has it.
func command(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	if err != nil {
		return "gone"
	}
	return strings.TrimSpace(string(b))
}

// cpuByChild formats the CPU seconds spent between two samples under each
// of the bench's children, most first.
func cpuByChild(a, b cpuSample) string {
	type use struct {
		name    string
		seconds float64
	}
	var uses []use
	for name, v := range b.byChild {
		uses = append(uses, use{name, v - a.byChild[name]})
	}
	sort.Slice(uses, func(i, j int) bool { return uses[i].seconds > uses[j].seconds })
	var parts []string
	for _, u := range uses {
		if u.seconds >= 0.05 {
			parts = append(parts, fmt.Sprintf("%s %.1f", u.name, u.seconds))
		}
	}
	return "CPU-s: " + strings.Join(parts, ", ")
}

// procStat reads a process's parent and CPU time, its reaped children's
// included (a Postgres backend that exits is counted in the postmaster).
func procStat(pid int) (ppid int, seconds float64, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	i := strings.LastIndexByte(string(b), ')') // the command may hold spaces
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:])) // from field 3, state
	if len(f) < 15 {
		return 0, 0, false
	}
	ppid, _ = strconv.Atoi(f[1])
	for _, v := range f[11:15] { // utime stime cutime cstime
		n, _ := strconv.ParseFloat(v, 64)
		seconds += n / clockTicks
	}
	return ppid, seconds, true
}

// cpuUse is CPU seconds between two samples: the bench's and other
// processes'.
type cpuUse struct {
	Seconds float64 `json:"seconds"` // wall-clock time between the samples
	Cores   int     `json:"cores"`
	Bench   float64 `json:"bench_cpu_seconds"`
	Others  float64 `json:"other_cpu_seconds"`
}

func cpuBetween(a, b cpuSample, seconds float64) cpuUse {
	u := cpuUse{Seconds: seconds, Cores: runtime.NumCPU(), Bench: b.ours - a.ours}
	u.Others = max(0, b.machine-a.machine-u.Bench)
	return u
}
