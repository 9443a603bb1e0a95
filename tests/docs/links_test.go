package docs

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// repoRoot is the repository this package is in: two folders up from
// tests/docs, where go.mod names the module.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil || !strings.HasPrefix(string(mod), "module github.com/spiderpool/spiderpool\n") {
		t.Fatalf("%s is not spiderpool's repository (go.mod: %v)", root, err)
	}
	return root
}

// TestEveryLinkInTheDocsResolves: every relative link of every Markdown
// file in the repository names a file or folder of it, every #anchor a
// heading of the file it points into, and every other link a public site.
func TestEveryLinkInTheDocsResolves(t *testing.T) {
	root := repoRoot(t)
	files, err := MarkdownFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"README.md", "docs/README.md", "deploy/README.md", "workflows/testdata/README.md"} {
		if !slices.Contains(files, want) {
			t.Errorf("%s is not among the Markdown files found: %v", want, files)
		}
	}
	problems, err := Check(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s", p)
	}
	t.Logf("%d Markdown files checked", len(files))
}

// TestCheckNamesEveryBrokenLink: on a small repository, each kind of
// broken link is reported at its line, and nothing else is: not links in
// code, not anchors that resolve.
func TestCheckNamesEveryBrokenLink(t *testing.T) {
	root := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		path := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("docs/guide.md", "# Guide\n\n## Set up `spiderpool dev`\n\n## Set up `spiderpool dev`\n\n"+
		"<a id=\"by-hand\"></a>\n\nBack to [the front page](../README.md#spiderpool).\n")
	write("bin/tool", "")
	write("node_modules/x/README.md", "[broken](nowhere.md)\n")
	write("README.md", strings.Join([]string{
		"# spiderpool", // 1
		"",
		"[Guide](docs/guide.md), [its set-up](docs/guide.md#set-up-spiderpool-dev), [again](docs/guide.md#set-up-spiderpool-dev-1),", // 3
		"[by hand](docs/guide.md#by-hand), [the docs](docs/), [Temporal](https://temporal.io) and [this page](#spiderpool).",         // 4
		"[No such file](docs/nope.md) and [no such", // 5
		"heading](docs/guide.md#setup).",            // 6
		"[Shared notes](../shared/notes.md), [a tool](bin/tool), [the Web UI](http://localhost:8233).", // 7
		"```sh",
		"[in a code block](docs/nope.md)",
		"```",
		"A `[code span](docs/nope.md)` and [a reference][ref].", // 11
		"",
		"[ref]: docs/missing.md", // 13
		"",
	}, "\n"))
	problems, err := Check(root)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.String())
	}
	want := []string{
		"README.md:5: docs/nope.md: no such file or folder in the repository",
		"README.md:6: docs/guide.md#setup: no heading of docs/guide.md has the anchor #setup",
		"README.md:7: ../shared/notes.md: a file outside the repository",
		"README.md:7: bin/tool: a file that is not the repository's (bin/, node_modules/, .git/, .spiderpool/)",
		"README.md:7: http://localhost:8233: a link to localhost:8233, not a public site",
		"README.md:13: docs/missing.md: no such file or folder in the repository",
	}
	if !slices.Equal(got, want) {
		t.Errorf("problems:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// TestSlugIsGitHubs: a heading's anchor is its rendered text, lower-cased,
// punctuation dropped, spaces made hyphens.
func TestSlugIsGitHubs(t *testing.T) {
	for heading, want := range map[string]string{
		"What a node listens on":                          "what-a-node-listens-on",
		"Temporal Cloud and TLS":                          "temporal-cloud-and-tls",
		"`spiderpool dev`":                                "spiderpool-dev",
		"1 billion URLs over 1,000 nodes: the arithmetic": "1-billion-urls-over-1000-nodes-the-arithmetic",
		"Politeness and a hostile web":                    "politeness-and-a-hostile-web",
		"**Bold** and _emphasis_ in snake_case":           "bold-and-emphasis-in-snake_case",
		"A [linked](https://example.org) word":            "a-linked-word",
		"Hosts in turn, not least recently leased first":  "hosts-in-turn-not-least-recently-leased-first",
		"Ünïcode – dashes":                                "ünïcode--dashes",
	} {
		if got := Slug(heading); got != want {
			t.Errorf("Slug(%q) = %q, want %q", heading, got, want)
		}
	}
}
