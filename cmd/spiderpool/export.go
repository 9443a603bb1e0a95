package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/spiderpool/spiderpool/archive"
	"github.com/spiderpool/spiderpool/store"
)

func (a *app) exportCmd() *cobra.Command {
	var o exportOptions
	cmd := &cobra.Command{
		Use:   "export ID [--format jsonl|cdxj|wacz] [--all | --items [--processor NAME]] [--warc-dir DIR]... [-o FILE]",
		Short: "Write a campaign's page records from Postgres, one JSON object a line",
		Long: `Write the campaign's page records (URL, status, content type, length,
digest, title, fetch time and duration, node) as JSON Lines, in discovery
order. --all adds every other URL of the frontier with its state and last
error: failed, excluded and still pending ones. It streams, so any size of
campaign exports in flat memory. Page bodies are in the nodes' WARC files.
A page a browser rendered has "rendered": true, with its DOM's
"rendered_length" and "rendered_digest"; its length and digest are those
of the document as served, which the WARC holds.

--items writes instead the items the campaign's processors returned, one
{"processor", "url", "item"} object a line, by processor and page;
--processor NAME keeps one processor's. In a recurring campaign, an item
of a page that did not change, kept for a processor with "unchanged":
"last_version", also has "carried_from": the run that fetched its version.

--format cdxj writes a CDXJ index of the campaign's WARC files (one line a
response or revisit record: SURT key, timestamp, URL, type, status,
digest, file, offset, length), and --format wacz a WACZ package (the WARC
files, that index, pages.jsonl and datapackage.json with a SHA-256 of each
file) that replayweb.page and pywb open. Both read the files the nodes
wrote under each --warc-dir (their --warc-dir, on shared storage, or copies
of them): DIR/CAMPAIGN/*.warc.gz.`,
		Example: "  spiderpool campaign export my-crawl > pages.jsonl\n  spiderpool campaign export my-crawl --format wacz --warc-dir /srv/warc -o my-crawl.wacz\n  spiderpool campaign export shop --items --processor products > products.jsonl\n  spiderpool campaign export my-crawl --all -o frontier.jsonl\n  spiderpool campaign export my-crawl | jq -r 'select(.status >= 400) | .url'",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			return a.export(cmd.Context(), args[0], o)
		},
	}
	cmd.Flags().StringVar(&o.format, "format", "jsonl", "output format: jsonl, cdxj (an index of the WARC files) or wacz (a replayable package)")
	cmd.Flags().StringArrayVar(&o.warcDirs, "warc-dir", nil, "with cdxj or wacz: a directory the nodes wrote WARC files to (repeatable)")
	cmd.Flags().BoolVar(&o.all, "all", false, "every URL of the frontier, not only fetched pages")
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "write to FILE instead of standard output")
	cmd.Flags().BoolVar(&o.items, "items", false, "the items processors returned, instead of page records")
	cmd.Flags().StringVar(&o.processor, "processor", "", "with --items: only this processor's items")
	cmd.MarkFlagsMutuallyExclusive("all", "items")
	return cmd
}

// exportOptions are the flags of `campaign export`.
type exportOptions struct {
	format    string   // jsonl, cdxj or wacz
	warcDirs  []string // with cdxj or wacz: where the nodes wrote WARC files
	all       bool     // jsonl: every URL of the frontier, not only pages
	output    string   // a file; "" or "-" for standard output
	items     bool     // jsonl: processors' items instead of page records
	processor string   // with items: only this processor's
}

// validate says which flags do not go together.
func (o exportOptions) validate() error {
	if o.processor != "" && !o.items {
		return fmt.Errorf("--processor %q needs --items", o.processor)
	}
	switch o.format {
	case "jsonl":
	case "cdxj", "wacz":
		if o.all || o.items {
			return fmt.Errorf("--format %s exports the WARC files: --all and --items are for jsonl", o.format)
		}
		if len(o.warcDirs) == 0 {
			return fmt.Errorf("--format %s needs --warc-dir DIR: where the nodes wrote their WARC files", o.format)
		}
	default:
		return fmt.Errorf("--format %q: jsonl, cdxj or wacz", o.format)
	}
	return nil
}

// export writes campaign id as o says.
func (a *app) export(ctx context.Context, id string, o exportOptions) error {
	st, err := a.openStore(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	key, err := st.CampaignKey(ctx, id)
	if err != nil {
		return err
	}
	if o.format != "jsonl" {
		return exportArchive(ctx, st, key, id, o.format, o.warcDirs, o.output)
	}
	return exportRecords(ctx, st, key, id, o)
}

// exportRecords writes the campaign's page records, or its processors'
// items, as JSON Lines.
func exportRecords(ctx context.Context, st *store.Store, key int64, id string, o exportOptions) error {
	bw, done, err := openOutput(o.output)
	if err != nil {
		return err
	}
	defer done()
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	var n int
	if o.items {
		n, err = st.ExportItems(ctx, key, o.processor, func(it store.Item) error { return enc.Encode(it) })
	} else {
		n, err = st.ExportPages(ctx, key, o.all, func(r store.PageRecord) error { return enc.Encode(r) })
	}
	if err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	if o.output != "" && o.output != "-" {
		fmt.Fprintf(os.Stderr, "%s: wrote %d records to %s\n", id, n, o.output)
	}
	return nil
}

// openOutput is where an export writes: FILE, or standard output for ""
// or "-", buffered. done closes the file; the caller flushes.
func openOutput(output string) (bw *bufio.Writer, done func(), err error) {
	out, done := os.Stdout, func() {}
	if output != "" && output != "-" {
		f, err := os.Create(output)
		if err != nil {
			return nil, nil, fmt.Errorf("export: %w", err)
		}
		out, done = f, func() { f.Close() }
	}
	return bufio.NewWriterSize(out, 1<<16), done, nil
}

// exportArchive writes the campaign's WARC files under dirs as a CDXJ index
// or a WACZ package; the pages a WACZ lists are the campaign's fetched
// HTML pages, as archived.
func exportArchive(ctx context.Context, st *store.Store, key int64, id, format string, dirs []string, output string) error {
	var files []string
	for _, d := range dirs {
		found, err := archive.Files(archive.CampaignDir(d, id))
		if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, archive.ErrNoFiles) {
			return fmt.Errorf("export: %w", err)
		}
		files = append(files, found...)
	}
	if len(files) == 0 {
		return fmt.Errorf("export: no WARC files of campaign %s under %s", id, strings.Join(dirs, ", "))
	}
	bw, done, err := openOutput(output)
	if err != nil {
		return err
	}
	defer done()
	var summary string
	switch format {
	case "cdxj":
		entries, err := archive.CDXJ(files, func(f string) string { return filepath.Base(f) })
		if err != nil {
			return fmt.Errorf("export: %w", err)
		}
		if err := archive.WriteCDXJ(bw, entries); err != nil {
			return fmt.Errorf("export: %w", err)
		}
		summary = fmt.Sprintf("%d records of %d WARC files", len(entries), len(files))
	case "wacz":
		var pages []archive.WACZPage
		_, err := st.ExportPages(ctx, key, false, func(r store.PageRecord) error {
			if r.Status >= 200 && r.Status < 300 && (r.ContentType == "text/html" || r.ContentType == "application/xhtml+xml") {
				u := r.URL
				if r.FoundAs != "" {
					u = r.FoundAs // what was requested, and archived
				}
				pages = append(pages, archive.WACZPage{URL: u, Title: r.Title})
			}
			return nil
		})
		if err != nil {
			return err
		}
		sum, err := archive.WriteWACZ(bw, files, archive.WACZOptions{Title: id, Description: "spiderpool campaign " + id, Pages: pages})
		if err != nil {
			return fmt.Errorf("export: %w", err)
		}
		summary = fmt.Sprintf("%d WARC files, %d records, %d pages", sum.Files, sum.Records, sum.Pages)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	if output != "" && output != "-" {
		fmt.Fprintf(os.Stderr, "%s: wrote %s to %s\n", id, summary, output)
	}
	return nil
}
