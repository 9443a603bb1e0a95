package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/control"
)

func (a *app) addCmd() *cobra.Command {
	var asJSON bool
	var file string
	var priority int
	cmd := &cobra.Command{
		Use:   "add ID [--priority P] [URL...]",
		Short: "Add URLs to a running campaign, and say of each whether it was new",
		Long: `Add URLs to a running campaign. Each is checked as a seed would be (depth 0)
and scoped as a link would be: it is new (stored, and fetched once under the
campaign's politeness and robots.txt), a duplicate (the campaign knows it
already, or it was given twice), out_of_scope, or invalid, with the reason.
URLs come from the arguments, from --file (one a line; "-" reads standard
input), or both; blank lines and lines starting with # are skipped. They
are sent in parts of ` + fmt.Sprint(campaign.MaxAddURLs) + `.

--priority P (0..` + fmt.Sprint(campaign.MaxPriority) + `) puts them ahead of their host's pending URLs
of lower priority (every URL is 0 unless added with another), and raises
the priority of the ones already pending. Within one priority, shallower
URLs go first. Hosts still take their turns: priority orders what a host
fetches next, not which host goes first.

Temporal CLI equivalent:
  temporal workflow update execute --workflow-id ID --name add_urls \
    --input '{"urls": ["https://example.com/a"]}'`,
		Example: "  spiderpool campaign add my-crawl https://example.com/new https://example.com/other\n" +
			"  spiderpool campaign add my-crawl --file urls.txt\n" +
			"  spiderpool campaign add my-crawl --priority 10 https://example.com/breaking-news\n" +
			"  grep -h '^http' *.txt | spiderpool campaign add my-crawl --file -",
		Args: cobra.MinimumNArgs(1),
		RunE: a.withCampaigns(func(ctx context.Context, cs *control.Campaigns, args []string) error {
			urls := args[1:]
			if file != "" {
				more, err := readURLs(file)
				if err != nil {
					return usageError(err)
				}
				urls = append(urls, more...)
			}
			if len(urls) == 0 {
				return usageError(errors.New("no URLs: give them as arguments or with --file"))
			}
			var all campaign.AddURLsResult
			for len(urls) > 0 {
				part := urls[:min(len(urls), campaign.MaxAddURLs)]
				urls = urls[len(part):]
				res, err := cs.AddURLs(ctx, args[0], part, priority)
				if err != nil {
					return err
				}
				all.URLs = append(all.URLs, res.URLs...)
			}
			all.Count()
			if asJSON {
				return printJSON(Steered{CampaignID: args[0], Operation: campaign.AddURLs, Added: &all})
			}
			for _, u := range all.URLs {
				if u.Result != campaign.AddedNew {
					fmt.Printf("%-12s %s  %s\n", u.Result, u.URL, u.Reason)
				}
			}
			fmt.Printf("%s: %d new, %d duplicate, %d out of scope, %d invalid\n",
				args[0], all.New, all.Duplicate, all.OutOfScope, all.Invalid)
			return nil
		}),
	}
	cmd.Flags().IntVar(&priority, "priority", 0, "put these URLs ahead of their host's pending URLs of lower priority (0.."+fmt.Sprint(campaign.MaxPriority)+")")
	cmd.Flags().StringVar(&file, "file", "", `read URLs from this file, one a line ("-": standard input)`)
	jsonFlag(cmd, &asJSON)
	return cmd
}

// readURLs reads one URL a line from path ("-": standard input), skipping
// blank lines and # comments.
func readURLs(path string) ([]string, error) {
	var r io.Reader = os.Stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("--file: %w", err)
		}
		defer f.Close()
		r = f
	}
	var out []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line != "" && !strings.HasPrefix(line, "#") {
			out = append(out, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--file %s: %w", path, err)
	}
	return out, nil
}
