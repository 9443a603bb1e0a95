package activities

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/spiderpool/spiderpool/admission"
	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/crawl"
	"github.com/spiderpool/spiderpool/store"
)

// BodyPath is where a node serves the page bodies processors get by
// reference: GET BodyPath + token. BatchPath is where it serves batches
// sent by reference: GET BatchPath + token.
const (
	BodyPath  = "/v1/bodies/"
	BatchPath = "/v1/batches/"
)

// BatchBodyBytes bounds the bodies a batch served with ?bodies=inline
// carries inside its pages (see BatchHandler).
const BatchBodyBytes = 8 << 20

// LeaseDeliveries leases the next batch of pages for a processor and
// builds the request its activity gets: bodies inline up to the
// processor's limit, by reference above it, or all by reference when the
// processor asks so and a node serves bodies.
func (c *Control) LeaseDeliveries(ctx context.Context, req campaign.DeliveryLeaseRequest) (campaign.DeliveryLease, error) {
	procs, err := c.campaignProcessors(ctx, req.CampaignKey)
	if err != nil {
		return campaign.DeliveryLease{}, err
	}
	i := slices.IndexFunc(procs, func(p campaign.Processor) bool { return p.Name == req.Processor })
	if i < 0 {
		return campaign.DeliveryLease{}, fmt.Errorf("campaign %s has no processor %q", req.CampaignID, req.Processor)
	}
	p := procs[i]
	if req.Reset {
		if _, err := c.Store.ReleaseDeliveries(ctx, req.CampaignKey, p.Name, campaign.LeaseRun(req.Lease)); err != nil {
			return campaign.DeliveryLease{}, err
		}
	}
	if len(req.Release) > 0 {
		n, err := c.Store.ReleaseChildLeases(ctx, req.CampaignKey, p.Name, req.Release)
		if err != nil {
			return campaign.DeliveryLease{}, err
		}
		if n > 0 {
			c.Log.Info("pages of failed processor batches back to pending", "campaign", req.CampaignID, "processor", p.Name, "pages", n)
		}
	}
	// The nodes' body endpoints, read only when needed: before the lease
	// for a processor that takes every body by reference (without a node
	// serving bodies, they go inline), else for a body too large to.
	bodyServers := bodyServers(ctx, c.Store)
	inline, batchBytes := p.InlineBodyLimit, int64(campaign.MaxInlineBatchBytes)
	if p.Bodies == campaign.BodiesReference || p.Batch == campaign.BatchReference || req.ByReference {
		servers, err := bodyServers()
		if err != nil {
			return campaign.DeliveryLease{}, err
		}
		switch {
		case len(servers) > 0 && p.Batch == campaign.BatchReference:
			return c.leaseBatch(ctx, req, p, servers)
		case req.ByReference:
			// The run carries this batch in its own history, which must
			// not hold pages: it gives the batch to a child instead.
			return campaign.DeliveryLease{Unserved: true}, nil
		case len(servers) > 0:
			inline, batchBytes = 0, 0
		}
	}
	lease, err := c.Store.LeaseDeliveries(ctx, storeLease(req), p.BatchSize, inline, batchBytes, p.MaxPending+1)
	if err != nil {
		return campaign.DeliveryLease{}, err
	}
	out := campaign.DeliveryLease{Waiting: lease.Waiting}
	if out.Request, err = processRequest(req.CampaignID, p.Name, lease.Pages, bodyServers); err != nil {
		return campaign.DeliveryLease{}, err
	}
	for _, lp := range lease.Pages {
		out.IDs = append(out.IDs, lp.ID)
	}
	return out, nil
}

// leaseBatch leases a batch for a processor that takes batches by
// reference: the request names the batch at each body server.
func (c *Control) leaseBatch(ctx context.Context, req campaign.DeliveryLeaseRequest, p campaign.Processor, servers []string) (campaign.DeliveryLease, error) {
	lease, err := c.Store.LeaseBatch(ctx, storeLease(req), p.BatchSize, p.MaxPending+1)
	if err != nil {
		return campaign.DeliveryLease{}, err
	}
	out := campaign.DeliveryLease{
		Request: campaign.ProcessRequest{Campaign: req.CampaignID, Processor: p.Name},
		IDs:     lease.IDs,
		Waiting: lease.Waiting,
	}
	if len(lease.IDs) > 0 {
		ref := &campaign.BatchRef{Token: lease.Token, Pages: len(lease.IDs)}
		for _, base := range servers {
			ref.URLs = append(ref.URLs, strings.TrimSuffix(base, BodyPath)+BatchPath+lease.Token)
		}
		out.Request.Batch = ref
	}
	return out, nil
}

// storeLease names a lease as the store does.
func storeLease(req campaign.DeliveryLeaseRequest) store.Lease {
	return store.Lease{CampaignKey: req.CampaignKey, CampaignID: req.CampaignID, Processor: req.Processor, ID: req.Lease}
}

// bodyServers lists the nodes' body endpoints, reading them at its first
// call only.
func bodyServers(ctx context.Context, st *store.Store) func() ([]string, error) {
	var bases []string
	read := false
	return func() ([]string, error) {
		if !read {
			servers, err := st.BodyServers(ctx)
			if err != nil {
				return nil, err
			}
			for _, addr := range servers {
				bases = append(bases, "http://"+addr+BodyPath)
			}
			read = true
		}
		return bases, nil
	}
}

// processRequest builds a processor's request from leased pages: a page
// whose body did not come with it gets a reference to it at every body
// server, which bodyServers lists.
func processRequest(campaignID, processor string, pages []store.LeasedPage, bodyServers func() ([]string, error)) (campaign.ProcessRequest, error) {
	out := campaign.ProcessRequest{Campaign: campaignID, Processor: processor}
	for _, lp := range pages {
		page := campaign.ProcessPage{
			Key: store.PageKey(campaignID, lp.ID), URL: lp.URL, FinalURL: lp.FinalURL, Depth: lp.Depth,
			Status: lp.Status, ContentType: lp.ContentType, FetchedAt: lp.FetchedAt,
			Body: lp.Body, BodyLength: lp.Length, Rendered: lp.Rendered,
		}
		if lp.Header != nil {
			if err := json.Unmarshal(lp.Header, &page.Headers); err != nil {
				return campaign.ProcessRequest{}, fmt.Errorf("headers of page %d: %w", lp.ID, err)
			}
		}
		if lp.Body == nil && lp.Length > 0 {
			servers, err := bodyServers()
			if err != nil {
				return campaign.ProcessRequest{}, err
			}
			ref := &campaign.BodyRef{SHA256: lp.SHA256, Token: lp.Token}
			for _, base := range servers {
				ref.URLs = append(ref.URLs, base+lp.Token)
			}
			page.BodyRef = ref
			out.BodyServers = servers
		}
		out.Pages = append(out.Pages, page)
	}
	return out, nil
}

// StoreProcessed stores what a processor returned for a batch: its items,
// and its links, admitted to the frontier as links the page had. A batch
// that failed for good fails each of its pages with the error.
func (c *Control) StoreProcessed(ctx context.Context, req campaign.StoreProcessedRequest) (campaign.StoreProcessedResult, error) {
	var res campaign.StoreProcessedResult
	l := store.Lease{CampaignKey: req.CampaignKey, CampaignID: req.CampaignID, Processor: req.Processor, ID: req.Lease}
	byKey := make(map[string]int64, len(req.IDs))
	for _, id := range req.IDs {
		byKey[store.PageKey(req.CampaignID, id)] = id
	}
	done := make(map[int64]*store.Processed, len(req.IDs))
	results := make([]store.Processed, len(req.IDs))
	for i, id := range req.IDs {
		results[i] = store.Processed{ID: id, Error: req.Error}
		done[id] = &results[i]
	}
	var links []store.NewURL
	if req.Error == "" && req.Result != nil {
		var err error
		if links, err = c.processorLinks(ctx, req, l, byKey); err != nil {
			return res, err
		}
		for _, pr := range req.Result.Pages {
			id, ok := byKey[pr.Key]
			if !ok {
				continue // not a page of this batch: ignored
			}
			r := done[id]
			r.Error, r.Links = pr.Error, len(pr.Links)
			for j, it := range pr.Items {
				if !json.Valid(it) {
					r.Error = fmt.Sprintf("item %d is not JSON", j)
				}
			}
			if r.Error == "" {
				r.Items = pr.Items
			}
		}
	}
	if len(links) > 0 {
		n, err := c.Store.InsertURLs(ctx, req.CampaignKey, links)
		if err != nil {
			return res, err
		}
		res.Discovered = n
	}
	if _, err := c.Store.StoreProcessed(ctx, l, results); err != nil {
		return res, err
	}
	for _, r := range results {
		if r.Error != "" {
			res.Failed++
		} else {
			res.Processed++
			res.Items += len(r.Items)
		}
	}
	return res, nil
}

// processorLinks turns the links a processor returned into frontier rows,
// admitted as links of their page (leased under l), one hop deeper.
func (c *Control) processorLinks(ctx context.Context, req campaign.StoreProcessedRequest, l store.Lease, byKey map[string]int64) ([]store.NewURL, error) {
	var wanted []int64
	for _, pr := range req.Result.Pages {
		if id, ok := byKey[pr.Key]; ok && len(pr.Links) > 0 && pr.Error == "" {
			wanted = append(wanted, id)
		}
	}
	if len(wanted) == 0 {
		return nil, nil
	}
	spec, err := c.Store.CampaignSpec(ctx, req.CampaignKey)
	if err != nil {
		return nil, err
	}
	rules, err := admission.Compile(req.CampaignKey, spec)
	if err != nil {
		return nil, err
	}
	pages, err := c.Store.DeliveryPages(ctx, l, wanted)
	if err != nil {
		return nil, err
	}
	var out []store.NewURL
	for _, pr := range req.Result.Pages {
		page, ok := pages[byKey[pr.Key]]
		if !ok || pr.Error != "" {
			continue
		}
		base, err := crawl.Canonicalize(page.FinalURL)
		if err != nil {
			continue
		}
		for _, raw := range pr.Links {
			u, err := crawl.Resolve(base, raw)
			if err != nil {
				continue
			}
			link := admission.Candidate{URL: u, Depth: page.Depth + 1, Parent: page.ID}
			if row, refused := rules.Admit(link, &c.queries); refused == crawl.InScope {
				out = append(out, row)
			}
		}
	}
	return out, nil
}

// BatchHandler serves the batches processors get by reference, from
// Postgres, so any live node serves any batch: GET BatchPath + token
// answers with the batch's request as JSON, its pages filled in and
// every body by reference (see campaign.ProcessRequest.Batch). With
// ?bodies=inline, bodies up to campaign.MaxInlineBodyLimit come inside
// their pages while the batch's stay within BatchBodyBytes, so one read
// of Postgres and one request get them; the others still go by
// reference. ?bodies=appended sends the same bodies after the JSON, as
// bytes (campaign.AppendedBatchType).
func BatchHandler(st *store.Store) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token := strings.TrimPrefix(r.URL.Path, BatchPath)
		if _, err := hex.DecodeString(token); err != nil || token == "" || r.Method != http.MethodGet {
			http.Error(w, "want GET "+BatchPath+"<token of a batch reference>", http.StatusBadRequest)
			return
		}
		var inline, budget int64
		bodies := r.URL.Query().Get("bodies")
		if bodies == "inline" || bodies == "appended" {
			inline, budget = campaign.MaxInlineBodyLimit, BatchBodyBytes
		}
		b, err := st.BatchByToken(r.Context(), token, inline, budget)
		switch {
		case errors.Is(err, store.ErrNoBatch):
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		case err != nil:
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		served, err := serve(b, bodyServers(r.Context(), st))
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		if bodies != "appended" {
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(served)
			return
		}
		after := make([][]byte, 0, len(served.Pages))
		for i := range served.Pages {
			if pg := &served.Pages[i]; pg.BodyRef == nil {
				after, pg.Body = append(after, pg.Body), nil
			}
		}
		w.Header().Set("Content-Type", campaign.AppendedBatchType)
		bw := bufio.NewWriterSize(w, 64<<10)
		json.NewEncoder(bw).Encode(served) // one line: the encoder escapes newlines in strings
		for _, body := range after {
			bw.Write(body)
		}
		bw.Flush()
	})
}

// servedBatch and servedPage are a batch as BatchHandler serves it: the
// campaign.ProcessRequest JSON, each page's headers the JSON object
// Postgres keeps (the shallower field wins the "headers" key), so they
// are never decoded into maps to be encoded again.
type servedBatch struct {
	campaign.ProcessRequest
	Pages []servedPage `json:"pages"`
}

type servedPage struct {
	campaign.ProcessPage
	Headers json.RawMessage `json:"headers"`
}

// serve is the batch b as BatchHandler serves it.
func serve(b store.Batch, bodyServers func() ([]string, error)) (servedBatch, error) {
	pages := slices.Clone(b.Pages)
	headers := make([]json.RawMessage, len(pages))
	for i := range pages {
		headers[i], pages[i].Header = pages[i].Header, nil
	}
	req, err := processRequest(b.CampaignID, b.Processor, pages, bodyServers)
	if err != nil {
		return servedBatch{}, err
	}
	out := servedBatch{ProcessRequest: req, Pages: make([]servedPage, len(req.Pages))}
	for i, pg := range req.Pages {
		out.Pages[i] = servedPage{ProcessPage: pg, Headers: headers[i]}
	}
	return out, nil
}

// BodyHandler serves the page bodies processors get by reference, from
// Postgres, so any live node serves any body: GET BodyPath + token for
// one, or POST BodyPath a JSON array of tokens for many in one answer
// (see campaign.ProcessRequest.BodyServers).
func BodyHandler(st *store.Store) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == BodyPath {
			serveBodies(st, w, r)
			return
		}
		token := r.URL.Path[len(BodyPath):]
		body, ctype, err := st.Body(r.Context(), token)
		switch {
		case err == store.ErrNoBody:
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		case err != nil:
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		if ctype != "" {
			w.Header().Set("Content-Type", ctype)
		}
		w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		w.Write(body)
	})
}

// serveBodies answers a POST of tokens with their bodies, each framed as
// "<token> <length>\n" and its bytes, in the order asked.
func serveBodies(st *store.Store, w http.ResponseWriter, r *http.Request) {
	var tokens []string
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&tokens); err != nil {
		http.Error(w, "want a JSON array of body tokens: "+err.Error(), http.StatusBadRequest)
		return
	}
	if len(tokens) > campaign.MaxBodiesPerRequest {
		http.Error(w, fmt.Sprintf("%d tokens: at most %d in one request", len(tokens), campaign.MaxBodiesPerRequest), http.StatusBadRequest)
		return
	}
	for i, t := range tokens {
		if _, err := hex.DecodeString(t); err != nil || t == "" {
			http.Error(w, fmt.Sprintf("token %d, %q: want the hex token of a body reference", i, t), http.StatusBadRequest)
			return
		}
	}
	bodies, err := st.Bodies(r.Context(), tokens)
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	bw := bufio.NewWriterSize(w, 64<<10)
	for _, t := range tokens {
		body, ok := bodies[t]
		if !ok {
			fmt.Fprintf(bw, "%s -1\n", t)
			continue
		}
		fmt.Fprintf(bw, "%s %d\n", t, len(body))
		bw.Write(body)
	}
	bw.Flush()
}
