package synthweb

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

func (s *SPA) article(a int) string { return SPARoot + "article/" + strconv.Itoa(a) }

func (s *SPA) isArticle(rest string) bool {
	n, ok := number(rest, "article/")
	return ok && n >= 1 && n <= s.Articles
}

// toArticles is the link a doc page has to the first article, when there
// are articles.
func (s *SPA) toArticles(rest string) string {
	if s.Articles == 0 || !strings.HasPrefix(rest, "doc/") {
		return ""
	}
	return ` <a href="` + s.article(1) + `">articles</a>`
}

// serveArticle writes an article as its server renders it: its text and
// links are in the HTML; its script only adds a class.
func (s *SPA) serveArticle(w http.ResponseWriter, rest string) {
	a, _ := number(rest, "article/")
	next := ""
	if a < s.Articles {
		next = `<a href="` + s.article(a+1) + `">next article</a> `
	}
	writeHTML(w, fmt.Sprintf(`<!doctype html><html><head><meta charset="utf-8"><title>article %[1]d</title></head><body>
<article><h1>Article %[1]d</h1>
<p>%[2]s</p>
<nav>%[3]s<a href="%[4]s">home</a></nav></article>
<script src="%[5]s"></script></body></html>`, a, strings.Repeat("The server wrote this article's words, as a reader sees them. ", 3), next, SPARoot, SPAEnhance))
}
