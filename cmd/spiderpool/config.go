package main

import (
	"encoding/json"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

func (a *app) configCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Show spiderpool's configuration",
	}
	var asJSON bool
	print := &cobra.Command{
		Use:   "print [worker flags]",
		Short: "Print the effective configuration: each setting, its value and where it came from",
		Long: `Print the configuration a command would run with, after defaults, environment
variables and flags, and where each value came from. It takes the worker's
flags too, so it shows what 'spiderpool worker' would use with the same
flags and environment. Every flag --NAME can be set as SPIDERPOOL_NAME
(upper case, dashes as underscores), except those with a name of their own:
DATABASE_URL, SPIDERPOOL_NODE_ID, SPIDERPOOL_NODE_WEIGHT, and the Temporal
connection's TEMPORAL_* variables.

The Temporal connection (address, namespace, TLS, API key) is read as the
temporal CLI reads it: a profile of its TOML file (TEMPORAL_CONFIG_FILE,
TEMPORAL_PROFILE), then TEMPORAL_* variables, then the --temporal-* flags.
Settings without a flag (temporal.api_key, PEM data) are listed when set.
Secrets are masked: passwords in the database URL, the API key, client key
data and credential-like gRPC headers.`,
		Example: "  spiderpool config print\n  SPIDERPOOL_FETCH_CONCURRENCY=64 spiderpool config print --node n1 --weight 2\n" +
			"  TEMPORAL_PROFILE=prod spiderpool config print\n  spiderpool config print --json | jq .Temporal",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if asJSON {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(a.cfg.Redacted())
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SETTING\tVALUE\tFROM\tENVIRONMENT")
			for _, s := range a.cfg.Settings(cmd.Flags()) {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.Name, s.Value, s.From, s.Env)
			}
			return tw.Flush()
		},
	}
	a.cfg.NodeFlags(print.Flags())
	print.Flags().BoolVar(&asJSON, "json", false, "print the configuration as JSON")
	cmd.AddCommand(print)
	return cmd
}
