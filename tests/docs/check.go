package docs

import (
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// A Problem is a link that does not resolve.
type Problem struct {
	File string // relative to the repository, with slashes
	Line int
	Dest string
	Why  string
}

func (p Problem) String() string { return fmt.Sprintf("%s:%d: %s: %s", p.File, p.Line, p.Dest, p.Why) }

// outsideRepository says whether the path (relative to the repository,
// with slashes) lies in a folder of the working tree that is not the
// repository's: git's own, the tools make builds into bin/, installed
// packages, spiderpool dev's local state.
func outsideRepository(rel string) bool {
	parts := strings.Split(rel, "/")
	if parts[0] == "bin" || parts[0] == ".spiderpool" {
		return true
	}
	return slices.ContainsFunc(parts, func(p string) bool { return p == ".git" || p == "node_modules" })
}

// MarkdownFiles lists the Markdown files of the repository at root, with
// slashes, relative to it.
func MarkdownFiles(root string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() && path != root && outsideRepository(rel) {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.EqualFold(filepath.Ext(path), ".md") {
			files = append(files, rel)
		}
		return nil
	})
	return files, err
}

var scheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)

// Check reads every Markdown file of the repository at root and returns
// the links that do not resolve, by file and line.
func Check(root string) ([]Problem, error) {
	files, err := MarkdownFiles(root)
	if err != nil {
		return nil, err
	}
	c := checker{root: root, docs: map[string]Document{}}
	var problems []Problem
	for _, file := range files {
		doc, err := c.document(file)
		if err != nil {
			return nil, err
		}
		for _, l := range doc.Links {
			if why := c.resolve(file, l.Dest); why != "" {
				problems = append(problems, Problem{File: file, Line: l.Line, Dest: l.Dest, Why: why})
			}
		}
	}
	slices.SortFunc(problems, func(a, b Problem) int {
		if a.File != b.File {
			return strings.Compare(a.File, b.File)
		}
		return a.Line - b.Line
	})
	return problems, nil
}

type checker struct {
	root string
	docs map[string]Document // parsed Markdown files, by path relative to root
}

func (c checker) document(rel string) (Document, error) {
	if doc, ok := c.docs[rel]; ok {
		return doc, nil
	}
	src, err := os.ReadFile(filepath.Join(c.root, filepath.FromSlash(rel)))
	if err != nil {
		return Document{}, err
	}
	doc := Parse(string(src))
	c.docs[rel] = doc
	return doc, nil
}

// resolve says why the link dest in file does not resolve, or "".
func (c checker) resolve(file, dest string) string {
	if dest == "" {
		return "an empty link"
	}
	if strings.HasPrefix(dest, "//") {
		dest = "https:" + dest
	}
	if scheme.MatchString(dest) {
		return external(dest)
	}
	target, fragment, _ := strings.Cut(dest, "#")
	target, _, _ = strings.Cut(target, "?")
	path, err := url.PathUnescape(target)
	if err != nil {
		return "a path that does not decode: " + err.Error()
	}
	rel := file // a bare #fragment points into the file itself
	if path != "" {
		if strings.HasPrefix(path, "/") { // GitHub reads these from the repository's root
			rel = filepath.ToSlash(filepath.Clean(strings.TrimPrefix(path, "/")))
		} else {
			rel = filepath.ToSlash(filepath.Join(filepath.Dir(file), path))
		}
		if rel == ".." || strings.HasPrefix(rel, "../") {
			return "a file outside the repository"
		}
		if outsideRepository(rel) {
			return "a file that is not the repository's (bin/, node_modules/, .git/, .spiderpool/)"
		}
		if _, err := os.Stat(filepath.Join(c.root, filepath.FromSlash(rel))); err != nil {
			return "no such file or folder in the repository"
		}
	}
	if fragment == "" || !strings.EqualFold(filepath.Ext(rel), ".md") {
		return ""
	}
	anchor, err := url.PathUnescape(fragment)
	if err != nil {
		return "an anchor that does not decode: " + err.Error()
	}
	doc, err := c.document(rel)
	if err != nil {
		return err.Error()
	}
	if !doc.Anchors[anchor] {
		return "no heading of " + rel + " has the anchor #" + anchor
	}
	return ""
}

// external says why a link with a scheme is not one to a public site, or
// "".
func external(dest string) string {
	u, err := url.Parse(dest)
	if err != nil {
		return "a URL that does not parse: " + err.Error()
	}
	switch strings.ToLower(u.Scheme) {
	case "mailto":
		return ""
	case "http", "https":
		if !publicHost(u.Hostname()) {
			return "a link to " + u.Host + ", not a public site"
		}
		return ""
	}
	return "a link by " + u.Scheme + ":, neither to a public site nor into the repository"
}
