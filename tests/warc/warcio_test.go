package warc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// record is one WARC record as webrecorder's warcio.js (npm "warcio")
// reads it: see read.mjs.
type record struct {
	File            string            `json:"file"`
	Offset          int64             `json:"offset"`
	Type            string            `json:"type"`
	Headers         map[string]string `json:"headers"`
	Block           []byte            `json:"block"`
	BlockDigestOK   *bool             `json:"block_digest_ok"`
	PayloadDigestOK *bool             `json:"payload_digest_ok"`
	HTTPStatus      int               `json:"http_status"`
	HTTPHeaders     map[string]string `json:"http_headers"`
	Content         []byte            `json:"content"` // the HTTP content, decoded by warcio
}

func (r record) Get(name string) string { return r.Headers[name] }

var (
	npmOnce sync.Once
	npmErr  error
)

// installWarcio runs `npm ci` in this directory, once per test binary,
// when node_modules does not hold the locked warcio: the reader is pinned
// by package-lock.json, and the test installs it itself (so `go test
// ./tests/warc` needs only node and npm on PATH and the registry).
func installWarcio(t *testing.T) {
	t.Helper()
	npmOnce.Do(func() {
		lock, err := os.Stat("package-lock.json")
		if err != nil {
			npmErr = err
			return
		}
		if mod, err := os.Stat(filepath.Join("node_modules", ".package-lock.json")); err == nil && !mod.ModTime().Before(lock.ModTime()) {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund").CombinedOutput()
		if err != nil {
			npmErr = &exec.Error{Name: "npm ci: " + string(out), Err: err}
		}
	})
	if npmErr != nil {
		t.Fatalf("installing warcio with npm: %v", npmErr)
	}
}

// warcio reads files with warcio.js and returns every record.
func warcio(t *testing.T, files ...string) []record {
	t.Helper()
	installWarcio(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "node", append([]string{"read.mjs"}, files...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("warcio.js could not read %v: %v\n%s", files, err, stderr.String())
	}
	var out []record
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var r record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("warcio.js output %q: %v", sc.Text(), err)
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
