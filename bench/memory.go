package main

import (
	"bufio"
	"bytes"
	"os"
	"slices"
	"strconv"
	"time"
)

// Memory of process trees, sampled: a browser crawler is a process and
// the Chromium processes below it, which come and go (a tab's renderer, a
// recycled browser), so their peak is not any one process's VmHWM. Every
// tick reads /proc once and sums, per tree, the resident sets (RSS,
// /proc/PID/statm: a page shared by several processes counts in each) and
// the CPU times; the proportional set size (PSS, /proc/PID/smaps_rollup: a
// page shared by n processes counts 1/n in each, so a tree's sum counts
// Chromium's shared pages once) is read when the RSS sum reaches a new
// high, and at least every pssEvery. smaps_rollup walks a process's page
// tables: a dozen Chromium processes cost 40ms of CPU a read, which ten
// times a second would take 40% of a core from the crawlers measured.

// pssEvery is the longest time between two PSS reads of a tree.
const pssEvery = time.Second

// memPeak is the most a tree held at one sample.
type memPeak struct {
	PSSMB float64 `json:"peak_pss_mb"`
	RSSMB float64 `json:"peak_rss_mb"`
	// Processes is the most processes the tree had at one sample.
	Processes int `json:"peak_processes"`
	// CPUSeconds is the tree's CPU time while watched, processes gone
	// and reaped inside it included; RootCPUSeconds is the first root's
	// own (the node, or Node.js), the rest being its helpers' (Chromium).
	// Read at the last sample, up to one interval before the end.
	CPUSeconds     float64 `json:"cpu_seconds"`
	RootCPUSeconds float64 `json:"root_cpu_seconds"`
}

// memTree names the roots of one tree at each tick: the roots and all
// their descendants are summed.
type memTree func(parent map[int]int) []int

// treeWatch is one tree's sampling state.
type treeWatch struct {
	roots   memTree
	peak    memPeak
	first   treeUse // at the first sample that found the tree
	pssRead time.Time
}

// sample reads the tree once and updates its peak.
func (w *treeWatch) sample(parent map[int]int) {
	roots := w.roots(parent)
	members := treeMembers(parent, roots)
	u := treeUsage(members, roots)
	p := &w.peak
	newHigh := mb(u.rss) > p.RSSMB
	p.RSSMB, p.Processes = max(p.RSSMB, mb(u.rss)), max(p.Processes, u.n)
	if u.n == 0 {
		return
	}
	if w.first.n == 0 {
		w.first = u
	}
	p.CPUSeconds = max(p.CPUSeconds, u.cpu-w.first.cpu)
	p.RootCPUSeconds = max(p.RootCPUSeconds, u.rootCPU-w.first.rootCPU)
	if newHigh || time.Since(w.pssRead) >= pssEvery {
		w.pssRead = time.Now()
		p.PSSMB = max(p.PSSMB, mb(treePSS(members)))
	}
}

// memWatch samples trees every interval until stop, which returns each
// tree's peak, in the order given.
func memWatch(every time.Duration, trees ...memTree) (stop func() []memPeak) {
	watches := make([]*treeWatch, len(trees))
	for i, t := range trees {
		watches[i] = &treeWatch{roots: t}
	}
	procs := processParents{}
	sample := func() {
		parent := procs.read()
		for _, w := range watches {
			w.sample(parent)
		}
	}
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			sample()
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() []memPeak {
		close(done)
		<-finished // the sampler is done: its state is ours now
		sample()   // the last moment too
		peaks := make([]memPeak, len(watches))
		for i, w := range watches {
			peaks[i] = w.peak
		}
		return peaks
	}
}

func mb(bytes int64) float64 { return float64(bytes) / (1 << 20) }

// processParents maps every live process to its parent. A process's
// parent is read once, when it is first seen: reading every process's
// stat ten times a second would cost the machine more than the crawlers
// it measures. (A process whose parent dies is moved to another; it
// stays counted where it was first seen.)
type processParents map[int]int

// read forgets the processes gone, learns the new ones and returns the
// map.
func (pp processParents) read() map[int]int {
	entries, _ := os.ReadDir("/proc")
	live := make(map[int]bool, len(entries))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		live[pid] = true
		if _, known := pp[pid]; known {
			continue
		}
		if ppid, _, ok := procStat(pid); ok {
			pp[pid] = ppid
		}
	}
	for pid := range pp {
		if !live[pid] {
			delete(pp, pid)
		}
	}
	return pp
}

// treeUse is what a tree held and had used at one sample.
type treeUse struct {
	rss          int64 // bytes
	n            int   // processes
	cpu, rootCPU float64
}

// treeMembers are roots and their descendants.
func treeMembers(parent map[int]int, roots []int) []int {
	in := map[int]bool{}
	for _, r := range roots {
		in[r] = true
	}
	for pid := range parent {
		if !in[pid] && under(parent, pid, in) {
			in[pid] = true
		}
	}
	members := make([]int, 0, len(in))
	for pid := range in {
		members = append(members, pid)
	}
	return members
}

// treeUsage sums RSS and CPU time over members. A process gone between
// the walk and the read counts nothing.
func treeUsage(members, roots []int) treeUse {
	var u treeUse
	for _, pid := range members {
		rss, ok := processRSS(pid)
		if !ok {
			continue
		}
		u.rss, u.n = u.rss+rss, u.n+1
		own, all := processCPU(pid)
		u.cpu += all
		if len(roots) > 0 && pid == roots[0] {
			u.rootCPU = own
		}
	}
	return u
}

// treePSS sums PSS over members, in bytes.
func treePSS(members []int) int64 {
	var pss int64
	for _, pid := range members {
		pss += processPSS(pid)
	}
	return pss
}

var pageSize = int64(os.Getpagesize())

// processRSS reads a process's resident set from statm, in bytes.
func processRSS(pid int) (int64, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm")
	if err != nil {
		return 0, false
	}
	f := bytes.Fields(b) // size resident shared text lib data dt, in pages
	if len(f) < 2 {
		return 0, false
	}
	n, err := strconv.ParseInt(string(f[1]), 10, 64)
	return n * pageSize, err == nil
}

// processCPU is a process's own CPU seconds and those with its reaped
// children's.
func processCPU(pid int) (own, all float64) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0
	}
	f := bytes.Fields(b[i+1:]) // from field 3, state
	if len(f) < 15 {
		return 0, 0
	}
	for j, v := range f[11:15] { // utime stime cutime cstime
		n, _ := strconv.ParseFloat(string(v), 64)
		if j < 2 {
			own += n / clockTicks
		}
		all += n / clockTicks
	}
	return own, all
}

// under says whether pid descends from a process in set.
func under(parent map[int]int, pid int, set map[int]bool) bool {
	for p, hops := parent[pid], 0; p > 1 && hops < 64; p, hops = parent[p], hops+1 {
		if set[p] {
			return true
		}
	}
	return false
}

// processPSS reads a process's Pss from smaps_rollup, in bytes; 0 when
// it is gone.
func processPSS(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if line := sc.Bytes(); bytes.HasPrefix(line, []byte("Pss:")) {
			return kbField(line)
		}
	}
	return 0
}

// kbField is the number of a "Name:   1234 kB" line, in bytes.
func kbField(line []byte) int64 {
	f := bytes.Fields(line)
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.ParseInt(string(f[1]), 10, 64)
	return n << 10
}

// childrenOf is a memTree: the processes whose parent is pid, but skip.
func childrenOf(pid int, skip ...int) memTree {
	return func(parent map[int]int) []int {
		var out []int
		for p, pp := range parent {
			if pp == pid && !slices.Contains(skip, p) {
				out = append(out, p)
			}
		}
		return out
	}
}

// processTree is a memTree: pid and its descendants.
func processTree(pid int) memTree { return func(map[int]int) []int { return []int{pid} } }
