package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// PageBody is what processors get of a fetched page, kept in a chunk of
// its commit (chunks.go) until every processor named has taken it.
type PageBody struct {
	// Processors are those that want the page.
	Processors []string
	// URL and Depth are the frontier's, of the URL fetched.
	URL         string
	Depth       int
	FinalURL    string
	Status      int
	Header      http.Header
	ContentType string
	FetchedAt   time.Time
	Body        []byte
	// Rendered: a browser rendered the page, and Body is its DOM.
	// Original is then the document as served, which those of
	// Processors in OriginalFor get instead (campaign.Processor.Document),
	// kept in chunks of its own: a chunk holds one body of a page, so a
	// body token names one.
	Rendered    bool
	Original    []byte
	OriginalFor []string
}

// chunkedBodies are the pages a commit keeps for processors, beside its
// outcomes (see recordOutcomes): pages with the body most processors get,
// and originals, the documents as served of rendered pages, for those
// that asked for them.
type chunkedBodies struct{ pages, originals []chunkPage }

func (b *chunkedBodies) empty() bool { return len(b.pages) == 0 && len(b.originals) == 0 }

// add keeps p, the body of page id, for a chunk of the commit, and its
// original for a chunk of originals.
func (b *chunkedBodies) add(id int64, p *PageBody) error {
	h, err := json.Marshal(p.Header)
	if err != nil {
		return err
	}
	page := chunkPage{
		ID: id, URL: p.URL, Depth: p.Depth, Final: p.FinalURL, Status: p.Status, Header: h,
		CType: p.ContentType, At: p.FetchedAt, Rendered: p.Rendered,
	}
	rendered, originals := p.Processors, []string(nil)
	if p.Rendered {
		rendered = slices.DeleteFunc(slices.Clone(p.Processors), func(name string) bool { return slices.Contains(p.OriginalFor, name) })
		originals = slices.DeleteFunc(slices.Clone(p.Processors), func(name string) bool { return !slices.Contains(p.OriginalFor, name) })
	}
	if len(rendered) > 0 {
		b.pages = append(b.pages, withBody(page, p.Body, rendered))
	}
	if len(originals) > 0 {
		b.originals = append(b.originals, withBody(page, p.Original, originals))
	}
	return nil
}

// withBody is page with body, for processors.
func withBody(page chunkPage, body []byte, processors []string) chunkPage {
	sum := sha256.Sum256(body)
	page.SHA256, page.body, page.processors = hex.EncodeToString(sum[:]), body, processors
	return page
}

// commit keeps a commit's pages in chunks in tx, then records its
// outcomes (outcomesSQL with args, $1 being the campaign) and says which
// it recorded; the pages of the others (their URLs no longer held by
// this holder) are taken out of the chunks' deliveries again. Outcomes
// go last because their update locks the URLs' frontier rows until the
// commit, and every concurrent insert of a link to one of them waits for
// that: bodies written after the update held those rows for the whole
// write (in a 100,000-page crawl with a no-op processor, the link
// inserts took 38.9 s of statement time against 25.2 s without a
// processor; written first, 24.8 s against 25.9 s).
func (b *chunkedBodies) commit(ctx context.Context, tx pgx.Tx, args []any) (map[int64]bool, error) {
	campaignKey := args[0]
	chunks, err := b.writeChunks(ctx, tx, campaignKey)
	if err != nil {
		return nil, err
	}
	accepted, err := readAccepted(tx.Query(ctx, outcomesSQL+` SELECT id FROM u`, args...))
	if err != nil {
		return nil, err
	}
	var lost []int64
	for _, p := range slices.Concat(b.pages, b.originals) {
		if !accepted[p.ID] {
			lost = append(lost, p.ID)
		}
	}
	if len(lost) > 0 {
		if err := dropLostChunked(ctx, tx, campaignKey, chunks, lost); err != nil {
			return nil, err
		}
	}
	return accepted, nil
}

// ErrNoBody is returned for a token that names no kept body.
var ErrNoBody = errors.New("no such body (its pages were all processed, or the token is wrong)")

// Body returns the body a token names, and its content type.
func (s *Store) Body(ctx context.Context, token string) ([]byte, string, error) {
	found := map[string]chunkPage{}
	if err := chunkBodies(ctx, s.pool, []string{token}, found); err != nil {
		return nil, "", fmt.Errorf("body %s: %w", token, err)
	}
	p, ok := found[token]
	if !ok {
		return nil, "", ErrNoBody
	}
	return p.body, p.CType, nil
}

// Bodies returns the kept bodies that tokens name, by token; a token that
// names none is left out.
func (s *Store) Bodies(ctx context.Context, tokens []string) (map[string][]byte, error) {
	found := map[string]chunkPage{}
	if err := chunkBodies(ctx, s.pool, tokens, found); err != nil {
		return nil, fmt.Errorf("bodies: %w", err)
	}
	out := make(map[string][]byte, len(found))
	for t, p := range found {
		out[t] = p.body
	}
	return out, nil
}

// randomToken is 16 random bytes in hex: a name nobody can guess.
func randomToken() (string, error) {
	var tok [16]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(tok[:]), nil
}
