package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// microResult is one `go test -bench` line.
type microResult struct {
	Name        string  `json:"name"`
	NsPerOp     float64 `json:"ns_per_op"`
	BytesPerOp  int64   `json:"bytes_per_op"`
	AllocsPerOp int64   `json:"allocs_per_op"`
}

// runMicro runs the hot-path microbenchmarks (ring lookup, canonical form
// and fingerprint, link resolution and extraction, the dedup upsert) and
// records them.
func runMicro(args []string) error {
	fs := flag.NewFlagSet("micro", flag.ExitOnError)
	out := fs.String("out", "results.json", "results file")
	root := fs.String("root", "..", "the spiderpool repository")
	fs.Parse(args)
	cmd := exec.Command("go", "test", "-run", "^$", "-bench", ".", "-benchmem", "./ring/", "./crawl/", "./store/")
	cmd.Dir = *root
	cmd.Stderr = os.Stderr
	raw, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("go test -bench: %w\n%s", err, raw)
	}
	os.Stdout.Write(raw)
	var results []microResult
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		m := microResult{Name: strings.TrimSuffix(f[0], "-"+strconv.Itoa(cpuSuffix(f[0])))}
		for i := 2; i+1 < len(f); i += 2 {
			v, _ := strconv.ParseFloat(f[i], 64)
			switch f[i+1] {
			case "ns/op":
				m.NsPerOp = v
			case "B/op":
				m.BytesPerOp = int64(v)
			case "allocs/op":
				m.AllocsPerOp = int64(v)
			}
		}
		results = append(results, m)
	}
	r := loadResults(*out)
	r.Micro = results
	return saveResults(*out, r)
}

// cpuSuffix is the -N GOMAXPROCS suffix go test appends to names.
func cpuSuffix(name string) int {
	i := strings.LastIndexByte(name, '-')
	if i < 0 {
		return -1
	}
	n, err := strconv.Atoi(name[i+1:])
	if err != nil {
		return -1
	}
	return n
}
