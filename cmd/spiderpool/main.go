// Command spiderpool is the one binary of spiderpool: node worker, local
// dev stack, migrations and the campaign client.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/spiderpool/spiderpool/config"
	"github.com/spiderpool/spiderpool/workers"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRoot().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "spiderpool:", workers.RootCause(err))
		os.Exit(1)
	}
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
	root.AddCommand(a.workerCmd(), a.migrateCmd(), a.devCmd(), a.campaignCmd(), a.configCmd(), versionCmd())
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
				return err
			}
			node := workers.Node(a.cfg, a.logger())
			if err := node.Err(); err != nil {
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

func (a *app) migrateCmd() *cobra.Command {
	return &cobra.Command{
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
			fmt.Printf("%s: %d migration(s) applied, schema up to date\n", st.Where(), n)
			return nil
		},
	}
}

var version = "dev"

func versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run:   func(*cobra.Command, []string) { fmt.Println("spiderpool", version) },
	}
}
