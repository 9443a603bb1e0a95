// Command spiderpool is the one binary of spiderpool: node worker, local
// dev stack, migrations and the campaign client.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/spiderpool/spiderpool/config"
	"github.com/spiderpool/spiderpool/workers"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}

// run runs one command line and returns its exit code (see exit.go).
func run(ctx context.Context, args []string) int {
	var bodyRan bool
	root := newRoot()
	markBodies(root, &bodyRan)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	code := exitCode(err, bodyRan)
	if err != nil {
		fmt.Fprintln(os.Stderr, "spiderpool:", workers.RootCause(err))
		if code == exitUsage && !bodyRan && cmd != nil {
			fmt.Fprintf(os.Stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		}
	}
	return code
}

// app carries the configuration every command shares.
type app struct {
	cfg config.Config
}

func newRoot() *cobra.Command {
	a := &app{cfg: config.Default()}
	root := &cobra.Command{
		Use:   "spiderpool",
		Short: "Distributed, durable web crawling on Temporal and Postgres",
		Long: `spiderpool crawls the web as durable Temporal workflows. Campaigns shard
hosts over nodes by weighted consistent hashing; Postgres holds the frontier,
the URL fingerprints that make every page fetched once, and the pages.

Try the whole thing locally:  make demo`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.cfg.ApplyEnv(cmd.Flags()); err != nil {
				return err
			}
			return a.cfg.Validate()
		},
	}
	a.cfg.Flags(root.PersistentFlags())
	root.AddCommand(a.workerCmd(), a.migrateCmd(), a.devCmd(), a.campaignCmd(), a.configCmd(), nodeSecretCmd(), versionCmd())
	return root
}

func (a *app) logger() *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(a.cfg.LogLevel))
	opts := &slog.HandlerOptions{Level: level}
	if a.cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}

func (a *app) workerCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "worker --node ID [--weight W]",
		Short: "Run a crawl node: fetch batches for campaigns, and run campaign workflows",
		Example: `  spiderpool worker --node node-1 --weight 1
  DATABASE_URL=postgres://crawler@db:5432/spiderpool TEMPORAL_ADDRESS=temporal:7233 spiderpool worker --node big-1 --weight 4`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.cfg.ValidateNode(); err != nil {
				return usageError(err)
			}
			node := workers.Node(a.cfg, a.logger())
			if err := node.Err(); err != nil {
				// Postgres or Temporal not reached: said as every command
				// says it, without fx's account of what needed them.
				var unreachable *workers.UnreachableError
				if errors.As(err, &unreachable) {
					return unreachableError(unreachable.Err)
				}
				return err
			}
			if err := node.Start(cmd.Context()); err != nil {
				return err
			}
			<-cmd.Context().Done()
			return node.Stop(context.Background())
		},
	}
	a.cfg.NodeFlags(cmd.Flags())
	return cmd
}

func nodeSecretCmd() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "node-secret --file FILE",
		Short: "Write a new node secret to FILE (owner-only), unless FILE holds one already",
		Long: `Nodes serve page bodies and batches (--bodies-addr) only to processors that
present the node secret as a bearer token. This writes a random one (32
bytes, hex) to FILE, readable by its owner only; an existing FILE is kept,
so it is safe to run at every start. Give nodes and processors the same
file (--node-secret-file, ` + config.EnvNodeSecretFile + `) or its contents (` + config.EnvNodeSecret + `).`,
		Example: "  spiderpool node-secret --file /etc/spiderpool/node-secret",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return usageError(errors.New("--file: where to write the secret"))
			}
			wrote, err := config.WriteNodeSecret(file)
			if err != nil {
				return err
			}
			if wrote {
				fmt.Fprintln(cmd.OutOrStdout(), "wrote a new node secret to", file)
			} else {
				fmt.Fprintln(cmd.OutOrStdout(), file, "holds a node secret already; kept")
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&file, "file", "", "where to write the secret")
	return cmd
}

func (a *app) migrateCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply the Postgres schema migrations (nodes also do this at start)",
		Long: `Apply the schema migrations embedded in this binary (schema/migrations) to the
database, each once, in order; an up-to-date schema is left alone. Nodes run
this at start too, so it is only needed to prepare a database ahead of them.`,
		Example: "  DATABASE_URL=postgres://spiderpool@db:5432/spiderpool spiderpool migrate",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := a.openStore(cmd.Context())
			if err != nil {
				return err
			}
			defer st.Close()
			n, err := st.Migrate(cmd.Context(), a.logger())
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(struct {
					Database string `json:"database"`
					Applied  int    `json:"applied"`
				}{st.Where(), n})
			}
			fmt.Printf("%s: %d migration(s) applied, schema up to date\n", st.Where(), n)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the database and the migrations applied as JSON")
	return cmd
}

// version and commit are stamped by the linker (make build, make image,
// deploy/Dockerfile): -ldflags "-X main.version=v0.3.0 -X main.commit=SHA".
var version, commit string

// Version is what this binary was built from.
type Version struct {
	Version string `json:"version"`
	Commit  string `json:"commit,omitempty"`
	// CommitTime and Modified come from Go's own VCS stamp, when the
	// binary was built in a git checkout.
	CommitTime string `json:"commit_time,omitempty"`
	Modified   bool   `json:"modified,omitempty"`
	Go         string `json:"go"`
	Platform   string `json:"platform"`
}

// buildVersion is the linker's stamp, else what Go recorded of the build:
// the module version (go install ...@v0.3.0) and the VCS revision (go
// build in a checkout).
func buildVersion() Version {
	v := Version{Version: version, Commit: commit, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v.Version = bi.Main.Version
		}
		vcs := map[string]string{}
		for _, s := range bi.Settings {
			vcs[s.Key] = s.Value
		}
		if rev := vcs["vcs.revision"]; rev != "" && (v.Commit == "" || v.Commit == rev) {
			v.Commit, v.CommitTime, v.Modified = rev, vcs["vcs.time"], vcs["vcs.modified"] == "true"
		}
	}
	if v.Version == "" {
		v.Version = "dev"
	}
	return v
}

func (v Version) String() string {
	s := "spiderpool " + v.Version
	var about []string
	if v.Commit != "" {
		about = append(about, "commit "+v.Commit)
	}
	if v.CommitTime != "" {
		about = append(about, v.CommitTime)
	}
	if v.Modified {
		about = append(about, "with uncommitted changes")
	}
	if len(about) > 0 {
		s += " (" + strings.Join(about, ", ") + ")"
	}
	return s + " " + v.Go + " " + v.Platform
}

func versionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version and commit this binary was built from",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			v := buildVersion()
			if asJSON {
				return printJSON(v)
			}
			fmt.Println(v)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the version as JSON")
	return cmd
}
