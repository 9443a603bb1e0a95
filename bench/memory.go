package main

import (
	"bufio"
	"bytes"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Memory of process trees, sampled: a browser crawler is a process and
// the Chromium processes below it, which come and go (a tab's renderer, a
// recycled browser), so their peak is not any one process's VmHWM. Every
// tick reads /proc once and sums, per tree, the proportional set size
// (PSS, /proc/PID/smaps_rollup: a page shared by n processes counts 1/n in
// each, so a tree's sum counts Chromium's shared pages once) and the
// resident sets (RSS, which counts them in every process that maps them).

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

// memWatch samples trees every interval until stop, which returns each
// tree's peak, in the order given.
func memWatch(every time.Duration, trees ...memTree) (stop func() []memPeak) {
	peaks := make([]memPeak, len(trees))
	var mu sync.Mutex
	procs := processParents{}
	done, finished := make(chan struct{}), make(chan struct{})
	first := make([]treeUse, len(trees))
	sample := func() {
		parent := procs.read()
		for i, t := range trees {
			u := treeMemory(parent, t(parent))
			mu.Lock()
			p := &peaks[i]
			p.PSSMB, p.RSSMB = max(p.PSSMB, mb(u.pss)), max(p.RSSMB, mb(u.rss))
			p.Processes = max(p.Processes, u.n)
			if first[i].n == 0 {
				first[i] = u
			}
			if u.n > 0 {
				p.CPUSeconds = max(p.CPUSeconds, u.cpu-first[i].cpu)
				p.RootCPUSeconds = max(p.RootCPUSeconds, u.rootCPU-first[i].rootCPU)
			}
			mu.Unlock()
		}
	}
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
		<-finished
		sample() // the last moment too
		mu.Lock()
		defer mu.Unlock()
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
	pss, rss     int64 // bytes
	n            int   // processes
	cpu, rootCPU float64
}

// treeMemory sums PSS, RSS and CPU time over roots and their descendants.
// A process gone between the walk and the read counts nothing.
func treeMemory(parent map[int]int, roots []int) treeUse {
	var u treeUse
	in := map[int]bool{}
	for _, r := range roots {
		in[r] = true
	}
	for pid := range parent {
		if !in[pid] && under(parent, pid, in) {
			in[pid] = true
		}
	}
	for pid := range in {
		p, r, ok := processMemory(pid)
		if !ok {
			continue
		}
		u.pss, u.rss, u.n = u.pss+p, u.rss+r, u.n+1
		own, all := processCPU(pid)
		u.cpu += all
		if len(roots) > 0 && pid == roots[0] {
			u.rootCPU = own
		}
	}
	return u
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

// processMemory reads a process's Pss and Rss from smaps_rollup, in bytes.
func processMemory(pid int) (pss, rss int64, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		return 0, 0, false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case bytes.HasPrefix(line, []byte("Pss:")):
			pss = kbField(line)
		case bytes.HasPrefix(line, []byte("Rss:")):
			rss = kbField(line)
		}
	}
	return pss, rss, true
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
