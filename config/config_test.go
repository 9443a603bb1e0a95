package config

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func parse(t *testing.T, args ...string) (*Config, *pflag.FlagSet) {
	t.Helper()
	c := Default()
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	c.Flags(fs)
	c.NodeFlags(fs)
	fs.Bool("json", false, "a command's own flag")
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	if err := c.ApplyEnv(fs); err != nil {
		t.Fatal(err)
	}
	return &c, fs
}

func TestFlagBeatsEnvironmentBeatsDefault(t *testing.T) {
	isolate(t)
	t.Setenv("SPIDERPOOL_FETCH_CONCURRENCY", "64")
	t.Setenv("SPIDERPOOL_DB_CONNS", "7")
	t.Setenv(EnvTemporalAddress, "temporal.internal:7233")
	t.Setenv("SPIDERPOOL_JSON", "true") // not configuration: ignored
	c, fs := parse(t, "--db-conns", "9")
	if c.Node.FetchConcurrency != 64 || c.Node.DBConns != 9 || c.TemporalAddress != "temporal.internal:7233" {
		t.Fatalf("fetch concurrency %d (env 64), db conns %d (flag 9), temporal %q (env)",
			c.Node.FetchConcurrency, c.Node.DBConns, c.TemporalAddress)
	}
	if c.From.TemporalAddress != EnvTemporalAddress || c.From.DatabaseURL != "default" {
		t.Errorf("sources %+v", c.From)
	}
	if got := SourceOf(fs.Lookup("db-conns")); got != "--db-conns" {
		t.Errorf("db-conns from %q", got)
	}
	if got := SourceOf(fs.Lookup("fetch-concurrency")); got != "SPIDERPOOL_FETCH_CONCURRENCY" {
		t.Errorf("fetch-concurrency from %q", got)
	}
	if j, _ := fs.GetBool("json"); j {
		t.Error("SPIDERPOOL_JSON set a command's own flag")
	}
}

func TestBadEnvironmentValueIsNamed(t *testing.T) {
	t.Setenv("SPIDERPOOL_TTL", "soon")
	c := Default()
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	c.NodeFlags(fs)
	_ = fs.Parse(nil)
	err := c.ApplyEnv(fs)
	if err == nil || !strings.Contains(err.Error(), `SPIDERPOOL_TTL="soon" (for --ttl)`) {
		t.Fatalf("err = %v, want it to name SPIDERPOOL_TTL and --ttl", err)
	}
}
