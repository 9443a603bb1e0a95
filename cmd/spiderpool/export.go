package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/spiderpool/spiderpool/store"
)

func (a *app) exportCmd() *cobra.Command {
	var (
		format    string
		all       bool
		output    string
		items     bool
		processor string
	)
	cmd := &cobra.Command{
		Use:   "export ID [--format jsonl] [--all | --items [--processor NAME]] [-o FILE]",
		Short: "Write a campaign's page records from Postgres, one JSON object a line",
		Long: `Write the campaign's page records (URL, status, content type, length,
digest, title, fetch time and duration, node) as JSON Lines, in discovery
order. --all adds every other URL of the frontier with its state and last
error: failed, excluded and still pending ones. It streams, so any size of
campaign exports in flat memory. Page bodies are in the nodes' WARC files.

--items writes instead the items the campaign's processors returned, one
{"processor", "url", "item"} object a line, by processor and page;
--processor NAME keeps one processor's.`,
		Example: "  spiderpool campaign export my-crawl > pages.jsonl\n  spiderpool campaign export shop --items --processor products > products.jsonl\n  spiderpool campaign export my-crawl --all -o frontier.jsonl\n  spiderpool campaign export my-crawl | jq -r 'select(.status >= 400) | .url'",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if processor != "" && !items {
				return fmt.Errorf("--processor %q needs --items", processor)
			}
			if format != "jsonl" {
				return fmt.Errorf("--format %q: only jsonl is supported", format)
			}
			ctx := cmd.Context()
			st, err := a.openStore(ctx)
			if err != nil {
				return err
			}
			defer st.Close()
			key, err := st.CampaignKey(ctx, args[0])
			if err != nil {
				return err
			}
			out := os.Stdout
			if output != "" && output != "-" {
				f, err := os.Create(output)
				if err != nil {
					return fmt.Errorf("export: %w", err)
				}
				defer f.Close()
				out = f
			}
			bw := bufio.NewWriterSize(out, 1<<16)
			enc := json.NewEncoder(bw)
			enc.SetEscapeHTML(false)
			var n int
			if items {
				n, err = st.ExportItems(ctx, key, processor, func(it store.Item) error { return enc.Encode(it) })
			} else {
				n, err = st.ExportPages(ctx, key, all, func(r store.PageRecord) error { return enc.Encode(r) })
			}
			if err != nil {
				return err
			}
			if err := bw.Flush(); err != nil {
				return fmt.Errorf("export: %w", err)
			}
			if output != "" && output != "-" {
				fmt.Fprintf(os.Stderr, "%s: wrote %d records to %s\n", args[0], n, output)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&format, "format", "jsonl", "output format: jsonl")
	cmd.Flags().BoolVar(&all, "all", false, "every URL of the frontier, not only fetched pages")
	cmd.Flags().StringVarP(&output, "output", "o", "", "write to FILE instead of standard output")
	cmd.Flags().BoolVar(&items, "items", false, "the items processors returned, instead of page records")
	cmd.Flags().StringVar(&processor, "processor", "", "with --items: only this processor's items")
	cmd.MarkFlagsMutuallyExclusive("all", "items")
	return cmd
}
