package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/spiderpool/spiderpool/config"
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
DATABASE_URL, TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, SPIDERPOOL_NODE_ID,
SPIDERPOOL_NODE_WEIGHT. Passwords in the database URL are masked.`,
		Example: "  spiderpool config print\n  SPIDERPOOL_FETCH_CONCURRENCY=64 spiderpool config print --node n1 --weight 2\n  spiderpool config print --json | jq .Node",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if asJSON {
				c := a.cfg
				c.DatabaseURL = maskPassword(c.DatabaseURL)
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(c)
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SETTING\tVALUE\tFROM\tENVIRONMENT")
			cmd.Flags().VisitAll(func(f *pflag.Flag) {
				if f.Name == "help" || f.Name == "json" {
					return
				}
				v := f.Value.String()
				if f.Name == "database-url" {
					v = maskPassword(v)
				}
				fmt.Fprintf(tw, "--%s\t%s\t%s\t%s\n", f.Name, v, config.SourceOf(f), config.EnvName(f.Name))
			})
			return tw.Flush()
		},
	}
	a.cfg.NodeFlags(print.Flags())
	print.Flags().BoolVar(&asJSON, "json", false, "print the configuration as JSON")
	cmd.AddCommand(print)
	return cmd
}

func maskPassword(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}
