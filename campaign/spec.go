// Package campaign owns what a crawl campaign is: its spec (one JSON
// document, every field defaulted and validated here), the contract between
// the CrawlCampaign workflow and its activities, and the names operators and
// tools use: task queues, signals, updates and queries.
//
// It is pure (no I/O), so workflow code, activities and the CLI share it.
package campaign

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/spiderpool/spiderpool/crawl"
	"github.com/spiderpool/spiderpool/ring"
)

// Spec is a campaign as a user writes it. Every field is optional except
// Seeds; Normalize fills the documented defaults.
type Spec struct {
	// Seeds are the URLs the crawl starts from (http or https).
	Seeds []string `json:"seeds"`
	// Scope says which discovered URLs are fetched.
	Scope Scope `json:"scope"`
	// Limits bound the crawl and each fetch.
	Limits Limits `json:"limits"`
	// Politeness is how hard each host is pushed.
	Politeness Politeness `json:"politeness"`
	// Retry is the per-URL retry policy for transient failures.
	Retry Retry `json:"retry"`
	// Timeouts bound each HTTP request.
	Timeouts Timeouts `json:"timeouts"`
	// Dispatch tunes how the workflow hands batches to nodes.
	Dispatch Dispatch `json:"dispatch"`
	// Sitemaps takes more seeds from the sitemaps robots.txt files list.
	Sitemaps Sitemaps `json:"sitemaps"`
	// Archive says which pages go to WARC, on nodes that archive.
	Archive Archive `json:"archive,omitzero"`
	// Processors receive every matching page (see Processor).
	Processors []Processor `json:"processors,omitempty"`
	// Recrawl, when set, makes the campaign one run of a recurring crawl
	// (see Recrawl).
	Recrawl *Recrawl `json:"recrawl,omitempty"`
	// Nodes, when set, restricts the campaign to these node IDs; by default
	// every live registered node takes part.
	Nodes []string `json:"nodes,omitempty"`
	// Render, when set, renders the pages that need it in a browser, on
	// the nodes that have one (see Render).
	Render *Render `json:"render,omitempty"`

	decodeErr error          // set by UnmarshalJSON, reported by Normalize
	unknown   map[string]any // fields a newer version wrote (see DecodeSpec)
}

// Scope: by default only the seeds' hosts (host[:port]) are in scope.
type Scope struct {
	// Hosts are extra authorities (host[:port]) in scope.
	Hosts []string `json:"hosts,omitempty"`
	// AllowedDomains puts these domains and their subdomains, on any port, in
	// scope. When Hosts or AllowedDomains is set, the seeds' hosts are only
	// in scope if listed.
	AllowedDomains []string `json:"allowed_domains,omitempty"`
	// Include, when set, admits only URLs matching one of these regular
	// expressions (RE2 syntax, matched against the canonical URL).
	Include []string `json:"include,omitempty"`
	// Exclude rejects URLs matching any of these regular expressions.
	Exclude []string `json:"exclude,omitempty"`
	// ShardBy is "host" (default) or "domain": the unit of routing and
	// politeness.
	ShardBy string `json:"shard_by,omitempty"`
	// FollowNofollow, true by default as most crawlers do, follows links
	// marked rel="nofollow" (or ugc, sponsored); false drops them. A page's
	// own nofollow (meta robots, X-Robots-Tag) is obeyed either way.
	FollowNofollow *bool `json:"follow_nofollow,omitempty"`
	// Requisites, off by default, also fetches what each page needs to
	// render (Heritrix's embeds, wget's -p): images (src and srcset),
	// stylesheets and the url()s and @imports in them (fonts, backgrounds),
	// scripts, icons. They are in scope only if this scope takes them (by
	// host, domain, include and exclude; at their page's depth), obey
	// robots.txt and politeness like pages, are fetched once per campaign,
	// and are counted apart from pages (frontier kind "requisite"). Their
	// own links are not followed.
	Requisites bool `json:"requisites,omitempty"`
	// Priorities give the URLs that match a pattern (a regular expression
	// on the URL) a priority: each URL found or added, seeds included, has
	// the highest of the rules it matches, else its sitemap's <priority>
	// (see SitemapPriority), else 0 (see PriorityRule). An operator adding
	// URLs with a priority raises them to it.
	Priorities []PriorityRule `json:"priorities,omitempty"`
}

// FollowsNofollow says whether links marked rel="nofollow" are taken.
// Unset means true, so that specs written before the field keep their
// meaning without Normalize writing it (a spec's normal form is recorded in
// workflow histories).
func (sc Scope) FollowsNofollow() bool { return sc.FollowNofollow == nil || *sc.FollowNofollow }

// Archive is what the campaign asks of a node's WARC archive.
type Archive struct {
	// IgnoreNoarchive archives pages that ask not to be (noarchive in
	// meta robots or X-Robots-Tag). Default false: they are kept out.
	IgnoreNoarchive bool `json:"ignore_noarchive,omitempty"`
}

// Limits bound the campaign. Zero means the default, noted per field.
type Limits struct {
	// MaxPages caps the URLs the campaign fetches (fetched + failed).
	// Default 0: no cap.
	MaxPages int64 `json:"max_pages"`
	// MaxDepth is how many links from a seed the crawl follows. Default 16;
	// 0 fetches only the seeds. A redirect does not add depth.
	MaxDepth *int `json:"max_depth,omitempty"`
	// MaxRedirects caps a redirect chain. Default 5.
	MaxRedirects int `json:"max_redirects"`
	// MaxBodyBytes caps the bytes read of one response body (after
	// decompression). Default 10 MiB.
	MaxBodyBytes int64 `json:"max_body_bytes"`
	// MaxURLLength rejects longer URLs. Default 2048.
	MaxURLLength int `json:"max_url_length"`
	// MaxLinksPerPage caps the links taken from one page. Default 1000.
	MaxLinksPerPage int `json:"max_links_per_page"`
	// MaxPathRepeats excludes URLs whose path repeats one segment more
	// often (a relative-link trap). Default 3.
	MaxPathRepeats int `json:"max_path_repeats"`
	// MaxQueryURLsPerHost caps the URLs with a query string one host may
	// add (an endless calendar, faceted search). Default 10000.
	MaxQueryURLsPerHost int `json:"max_query_urls_per_host"`
}

// Politeness is per host (per shard key).
type Politeness struct {
	// UserAgent is sent with every request. Default
	// "spiderpool/0.1 (+https://github.com/spiderpool/spiderpool)".
	UserAgent string `json:"user_agent,omitempty"`
	// MaxConcurrencyPerHost caps simultaneous requests to one host. Default 2.
	MaxConcurrencyPerHost int `json:"max_concurrency_per_host"`
	// MinDelay is the least time between two requests to one host, held
	// across all nodes. Default 0.
	MinDelay Duration `json:"min_delay"`
	// IgnoreRobots skips robots.txt. Default false: robots.txt is obeyed.
	IgnoreRobots bool `json:"ignore_robots,omitempty"`
	// RobotsTTL is how long a fetched robots.txt is trusted. Default 24h.
	RobotsTTL Duration `json:"robots_ttl"`
	// RobotsRetry is how soon a robots.txt that answered 5xx or not at all
	// is tried again; its host waits meanwhile. Default 30s.
	RobotsRetry Duration `json:"robots_retry"`
	// MaxCrawlDelay caps a robots.txt Crawl-delay (which slows the host,
	// never drops it). Default 30s.
	MaxCrawlDelay Duration `json:"max_crawl_delay"`
	// MaxRetryAfter caps how long a 429 or 503 Retry-After pauses a host.
	// Default 5m.
	MaxRetryAfter Duration `json:"max_retry_after"`
}

// Sitemaps, when enabled, adds the URLs of each in-scope host's sitemaps
// (from its robots.txt Sitemap lines; index files and gzip followed) as
// seeds.
type Sitemaps struct {
	Enabled bool `json:"enabled,omitempty"`
	// MaxURLsPerHost caps the URLs taken from one host's sitemaps.
	// Default 50000.
	MaxURLsPerHost int `json:"max_urls_per_host"`
}

// Retry is the per-URL policy for transient failures (5xx, 408, 429,
// timeouts, connection errors). Other 4xx are final at once.
type Retry struct {
	// MaxAttempts counts the first attempt. Default 3.
	MaxAttempts int `json:"max_attempts"`
	// InitialInterval is the wait before the second attempt. Default 1s.
	InitialInterval Duration `json:"initial_interval"`
	// BackoffCoefficient multiplies the wait after each attempt. Default 2.
	BackoffCoefficient float64 `json:"backoff_coefficient"`
	// MaxInterval caps the wait. Default 1m.
	MaxInterval Duration `json:"max_interval"`
	// NonRetryableStatuses are 5xx/408/429 statuses to treat as final.
	NonRetryableStatuses []int `json:"non_retryable_statuses,omitempty"`
}

// Timeouts bound one HTTP request.
type Timeouts struct {
	// Connect bounds DNS and TCP/TLS connection set-up. Default 5s.
	Connect Duration `json:"connect"`
	// Request bounds a whole request, body included. Default 30s.
	Request Duration `json:"request"`
	// Idle aborts a body that sends nothing for this long. Default 10s.
	Idle Duration `json:"idle"`
}

// Dispatch tunes the workflow's batching. The defaults suit most crawls.
type Dispatch struct {
	// BatchSize is the most URLs in one batch. Default 1000.
	BatchSize int `json:"batch_size"`
	// WindowPerNode is how many batches each node may have in flight.
	// Default 4.
	WindowPerNode int `json:"window_per_node"`
	// HeartbeatTimeout is read by nothing since batches go through Postgres
	// (a node's death is its registry heartbeat's); kept, with its default
	// of 10s, so that specs which set it parse as before.
	HeartbeatTimeout Duration `json:"heartbeat_timeout"`
	// ScheduleToStartTimeout is read by nothing; kept so that specs which
	// set it parse as before.
	ScheduleToStartTimeout Duration `json:"schedule_to_start_timeout"`
	// LeaseTTL: leased URLs not confirmed by a live batch within this time
	// return to pending. Default 2m.
	LeaseTTL Duration `json:"lease_ttl"`
	// MembershipRefresh is how often the node registry is re-read.
	// Default 10s.
	MembershipRefresh Duration `json:"membership_refresh"`
	// MaxHistoryEvents: a run continues as new past this many events (or
	// when Temporal suggests it). Default 10000.
	MaxHistoryEvents int `json:"max_history_events"`
	// AdaptiveWeights scales each node's registered weight by how fast and
	// how error-free its fetches have been (moving averages from batch
	// results), changing it only when the change exceeds a quarter, and
	// recording every change. Operator weights still win. Default off.
	AdaptiveWeights bool `json:"adaptive_weights,omitempty"`
}

// Defaults.
const (
	DefaultUserAgent       = "spiderpool/0.1 (+https://github.com/spiderpool/spiderpool)"
	DefaultMaxDepth        = 16
	DefaultMaxRedirects    = 5
	DefaultMaxBodyBytes    = 10 << 20
	DefaultMaxURLLength    = 2048
	DefaultMaxLinksPerPage = 1000
	DefaultConcurrency     = 2
	DefaultMaxAttempts     = 3
	DefaultBatchSize       = 1000
	DefaultWindowPerNode   = 4
	DefaultHistoryEvents   = 10_000
)

// FieldError is a problem with one field of a spec or signal.
type FieldError struct {
	Field   string // e.g. "spec.limits.max_pages"
	Problem string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Problem }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// Normalize validates the spec and returns it with defaults filled in. The
// error joins one FieldError per problem, each naming its field: those
// ParseSpec or DecodeSpec found (a value of the wrong type, an unknown
// field) first, then those of the values that did decode, so that a spec
// with several mistakes has them all named at once.
func (s Spec) Normalize() (Spec, error) {
	errs, undecoded, err := decodeProblems(s.decodeErr)
	if err != nil {
		return s, err // there is no spec to check
	}
	add := func(err error) {
		var fe *FieldError
		if err == nil || errors.As(err, &fe) && below(fe.Field, undecoded) {
			return // its value is named above already, and is not what the person wrote
		}
		errs = append(errs, err)
	}
	// Each step fills one part's defaults and reports its problems, in the
	// order Spec declares its fields.
	s.normalizeSeeds(add)
	s.normalizeScope(add)
	s.normalizeLimits(add)
	s.normalizePoliteness(add)
	s.normalizeRetry(add)
	s.normalizeTimeouts(add)
	s.normalizeDispatch(add)
	s.normalizeSitemaps(add)
	s.normalizeProcessors(add)
	s.normalizeRecrawl(add)
	s.normalizeNodes(add)
	s.normalizeRender(add)
	return s, errors.Join(errs...)
}

// decodeProblems splits what decoding found into the problems to report
// and the fields whose values did not decode (whose checks would only
// repeat them). A syntax error is returned alone as fatal: there is no spec
// to check.
func decodeProblems(decodeErr error) (errs []error, undecoded []string, fatal error) {
	for _, err := range flatten(decodeErr) {
		var se *SyntaxError
		if errors.As(err, &se) {
			return nil, nil, err
		}
		errs = append(errs, err)
		if fe, ok := err.(*FieldError); ok && fe.Field != "spec" {
			undecoded = append(undecoded, fe.Field)
		}
	}
	return errs, undecoded, nil
}

func (s *Spec) normalizeSeeds(add func(error)) {
	if len(s.Seeds) == 0 {
		add(fieldErr("spec.seeds", "at least one seed URL is required"))
	}
	for i, seed := range s.Seeds {
		if _, err := crawl.Canonicalize(seed); err != nil {
			add(fieldErr(fmt.Sprintf("spec.seeds[%d]", i), "%q is not an http(s) URL: %v", seed, unwrapParse(err)))
		}
	}
}

// normalizeScope lower-cases the scope's hosts and domains in place and
// checks its patterns; CompileScope relies on them being valid.
func (s *Spec) normalizeScope(add func(error)) {
	sc := &s.Scope
	switch sc.ShardBy {
	case "":
		sc.ShardBy = string(crawl.ShardByHost)
	case string(crawl.ShardByHost), string(crawl.ShardByDomain):
	default:
		add(fieldErr("spec.scope.shard_by", "want \"host\" or \"domain\", got %q", sc.ShardBy))
	}
	for i, d := range sc.AllowedDomains {
		if d = strings.ToLower(strings.Trim(strings.TrimSpace(d), ".")); d == "" || strings.ContainsAny(d, "/:@ ") {
			add(fieldErr(fmt.Sprintf("spec.scope.allowed_domains[%d]", i), "%q is not a domain name", sc.AllowedDomains[i]))
		} else {
			sc.AllowedDomains[i] = d
		}
	}
	normalizeHosts(add, "spec.scope.hosts", sc.Hosts, "a host[:port]")
	for i, r := range sc.Priorities {
		field := fmt.Sprintf("spec.scope.priorities[%d]", i)
		if _, err := regexp.Compile(r.Pattern); err != nil || r.Pattern == "" {
			add(fieldErr(field+".pattern", "want a regular expression on the URL, got %q (%v)", r.Pattern, err))
		}
		if r.Priority < MinPriority || r.Priority > MaxPriority {
			add(fieldErr(field+".priority", "must be %d..%d, got %d", MinPriority, MaxPriority, r.Priority))
		}
	}
	checkPatterns(add, "spec.scope.include", sc.Include)
	checkPatterns(add, "spec.scope.exclude", sc.Exclude)
}

// normalizeHosts lower-cases and trims each host of a list in place, and
// reports (as field[i]) one that is not what (a host[:port], ...).
func normalizeHosts(add func(error), field string, hosts []string, what string) {
	for i, h := range hosts {
		if h = strings.ToLower(strings.TrimSpace(h)); h == "" || strings.ContainsAny(h, "/@ ") {
			add(fieldErr(fmt.Sprintf("%s[%d]", field, i), "%q is not %s", hosts[i], what))
		} else {
			hosts[i] = h
		}
	}
}

// checkPatterns reports (as field[i]) each pattern of a list that is not
// a regular expression.
func checkPatterns(add func(error), field string, pats []string) {
	for i, p := range pats {
		if _, err := regexp.Compile(p); err != nil {
			add(fieldErr(fmt.Sprintf("%s[%d]", field, i), "bad regular expression: %v", err))
		}
	}
}

func (s *Spec) normalizeLimits(add func(error)) {
	l := &s.Limits
	nonNegative := func(field string, v int64) {
		if v < 0 {
			add(fieldErr("spec.limits."+field, "must be >= 0, got %d", v))
		}
	}
	nonNegative("max_pages", l.MaxPages)
	nonNegative("max_redirects", int64(l.MaxRedirects))
	nonNegative("max_body_bytes", l.MaxBodyBytes)
	nonNegative("max_url_length", int64(l.MaxURLLength))
	nonNegative("max_links_per_page", int64(l.MaxLinksPerPage))
	if l.MaxDepth == nil {
		l.MaxDepth = new(DefaultMaxDepth)
	} else {
		nonNegative("max_depth", int64(*l.MaxDepth))
	}
	defaultInt(&l.MaxRedirects, DefaultMaxRedirects)
	if l.MaxBodyBytes == 0 {
		l.MaxBodyBytes = DefaultMaxBodyBytes
	}
	defaultInt(&l.MaxURLLength, DefaultMaxURLLength)
	defaultInt(&l.MaxLinksPerPage, DefaultMaxLinksPerPage)
	nonNegative("max_path_repeats", int64(l.MaxPathRepeats))
	nonNegative("max_query_urls_per_host", int64(l.MaxQueryURLsPerHost))
	defaultInt(&l.MaxPathRepeats, 3)
	defaultInt(&l.MaxQueryURLsPerHost, 10_000)
	if l.MaxRedirects > 50 {
		add(fieldErr("spec.limits.max_redirects", "must be <= 50, got %d", l.MaxRedirects))
	}
}

func (s *Spec) normalizePoliteness(add func(error)) {
	p := &s.Politeness
	if p.UserAgent = strings.TrimSpace(p.UserAgent); p.UserAgent == "" {
		p.UserAgent = DefaultUserAgent
	} else if strings.ContainsAny(p.UserAgent, "\r\n") {
		add(fieldErr("spec.politeness.user_agent", "must be one line"))
	}
	if p.MaxConcurrencyPerHost < 0 || p.MaxConcurrencyPerHost > 256 {
		add(fieldErr("spec.politeness.max_concurrency_per_host", "must be 1..256, got %d", p.MaxConcurrencyPerHost))
	}
	defaultInt(&p.MaxConcurrencyPerHost, DefaultConcurrency)
	durationIn(add, "spec.politeness.min_delay", p.MinDelay, 0, time.Hour)
	defaultDuration(&p.RobotsTTL, 24*time.Hour)
	defaultDuration(&p.RobotsRetry, 30*time.Second)
	defaultDuration(&p.MaxCrawlDelay, 30*time.Second)
	defaultDuration(&p.MaxRetryAfter, 5*time.Minute)
	durationIn(add, "spec.politeness.robots_ttl", p.RobotsTTL, time.Second, 30*24*time.Hour)
	durationIn(add, "spec.politeness.robots_retry", p.RobotsRetry, 100*time.Millisecond, 24*time.Hour)
	durationIn(add, "spec.politeness.max_crawl_delay", p.MaxCrawlDelay, 0, time.Hour)
	durationIn(add, "spec.politeness.max_retry_after", p.MaxRetryAfter, 0, 24*time.Hour)
}

func (s *Spec) normalizeRetry(add func(error)) {
	r := &s.Retry
	if r.MaxAttempts < 0 || r.MaxAttempts > 100 {
		add(fieldErr("spec.retry.max_attempts", "must be 1..100, got %d", r.MaxAttempts))
	}
	defaultInt(&r.MaxAttempts, DefaultMaxAttempts)
	defaultDuration(&r.InitialInterval, time.Second)
	defaultDuration(&r.MaxInterval, time.Minute)
	if r.BackoffCoefficient == 0 {
		r.BackoffCoefficient = 2
	}
	durationIn(add, "spec.retry.initial_interval", r.InitialInterval, time.Millisecond, 24*time.Hour)
	durationIn(add, "spec.retry.max_interval", r.MaxInterval, r.InitialInterval.D(), 24*time.Hour)
	if r.BackoffCoefficient < 1 || r.BackoffCoefficient > 100 {
		add(fieldErr("spec.retry.backoff_coefficient", "must be 1..100, got %v", r.BackoffCoefficient))
	}
	for i, st := range r.NonRetryableStatuses {
		if st < 100 || st > 599 {
			add(fieldErr(fmt.Sprintf("spec.retry.non_retryable_statuses[%d]", i), "%d is not an HTTP status", st))
		}
	}
}

func (s *Spec) normalizeTimeouts(add func(error)) {
	t := &s.Timeouts
	defaultDuration(&t.Connect, 5*time.Second)
	defaultDuration(&t.Request, 30*time.Second)
	defaultDuration(&t.Idle, 10*time.Second)
	durationIn(add, "spec.timeouts.idle", t.Idle, time.Millisecond, time.Hour)
	durationIn(add, "spec.timeouts.connect", t.Connect, time.Millisecond, time.Hour)
	durationIn(add, "spec.timeouts.request", t.Request, time.Millisecond, time.Hour)
}

func (s *Spec) normalizeDispatch(add func(error)) {
	d := &s.Dispatch
	if d.BatchSize < 0 || d.BatchSize > 5000 {
		add(fieldErr("spec.dispatch.batch_size", "must be 1..5000, got %d", d.BatchSize))
	}
	if d.WindowPerNode < 0 || d.WindowPerNode > 64 {
		add(fieldErr("spec.dispatch.window_per_node", "must be 1..64, got %d", d.WindowPerNode))
	}
	if d.MaxHistoryEvents != 0 && (d.MaxHistoryEvents < 500 || d.MaxHistoryEvents > 40_000) {
		add(fieldErr("spec.dispatch.max_history_events", "must be 500..40000, got %d", d.MaxHistoryEvents))
	}
	defaultInt(&d.BatchSize, DefaultBatchSize)
	defaultInt(&d.WindowPerNode, DefaultWindowPerNode)
	defaultInt(&d.MaxHistoryEvents, DefaultHistoryEvents)
	defaultDuration(&d.HeartbeatTimeout, 10*time.Second)
	defaultDuration(&d.ScheduleToStartTimeout, 10*time.Second)
	defaultDuration(&d.LeaseTTL, 2*time.Minute)
	defaultDuration(&d.MembershipRefresh, 10*time.Second)
	durationIn(add, "spec.dispatch.heartbeat_timeout", d.HeartbeatTimeout, time.Second, time.Hour)
	durationIn(add, "spec.dispatch.schedule_to_start_timeout", d.ScheduleToStartTimeout, time.Second, time.Hour)
	durationIn(add, "spec.dispatch.lease_ttl", d.LeaseTTL, 3*d.HeartbeatTimeout.D(), 24*time.Hour)
	durationIn(add, "spec.dispatch.membership_refresh", d.MembershipRefresh, time.Second, time.Hour)
}

func (s *Spec) normalizeSitemaps(add func(error)) {
	if s.Sitemaps.MaxURLsPerHost < 0 {
		add(fieldErr("spec.sitemaps.max_urls_per_host", "must be >= 0, got %d", s.Sitemaps.MaxURLsPerHost))
	}
	defaultInt(&s.Sitemaps.MaxURLsPerHost, 50_000)
}

func (s *Spec) normalizeNodes(add func(error)) {
	seen := map[string]bool{}
	for i, n := range s.Nodes {
		field := fmt.Sprintf("spec.nodes[%d]", i)
		if err := ValidNodeID(n); err != nil {
			add(fieldErr(field, "%v", err))
		} else if seen[n] {
			add(fieldErr(field, "node %q is listed twice", n))
		}
		seen[n] = true
	}
}

// flatten lists the errors errors.Join joined.
func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	if err == nil {
		return nil
	}
	return []error{err}
}

// below says whether field is one of fields or inside one of them.
func below(field string, fields []string) bool {
	for _, f := range fields {
		if field == f || strings.HasPrefix(field, f+".") || strings.HasPrefix(field, f+"[") {
			return true
		}
	}
	return false
}

// CompileScope builds the scope rules of a normalised spec, for
// admission.Compile: URLs are judged by the campaign's admission rules,
// which hold the scope, never by the scope alone.
func (s Spec) CompileScope() (*crawl.Scope, error) {
	sc := &crawl.Scope{
		Hosts:          slices.Clone(s.Scope.Hosts),
		Domains:        slices.Clone(s.Scope.AllowedDomains),
		MaxDepth:       *s.Limits.MaxDepth,
		MaxURLLength:   s.Limits.MaxURLLength,
		MaxPathRepeats: s.Limits.MaxPathRepeats,
	}
	if len(sc.Hosts) == 0 && len(sc.Domains) == 0 {
		for _, seed := range s.Seeds {
			if u, err := crawl.Canonicalize(seed); err == nil && !slices.Contains(sc.Hosts, u.Host) {
				sc.Hosts = append(sc.Hosts, u.Host)
			}
		}
	}
	for _, p := range s.Scope.Include {
		re, err := regexp.Compile(p)
		if err != nil {
			return nil, fmt.Errorf("spec.scope.include: %w", err)
		}
		sc.Include = append(sc.Include, re)
	}
	for _, p := range s.Scope.Exclude {
		re, err := regexp.Compile(p)
		if err != nil {
			return nil, fmt.Errorf("spec.scope.exclude: %w", err)
		}
		sc.Exclude = append(sc.Exclude, re)
	}
	return sc, nil
}

// ValidNodeID checks a node ID: it names a task queue and a Postgres row, so
// it is 1..64 characters of letters, digits, '.', '_' and '-'.
func ValidNodeID(id string) error {
	if id == "" || len(id) > 64 {
		return fmt.Errorf("node id must be 1..64 characters, got %q", id)
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("node id %q may hold only letters, digits, '.', '_' and '-'", id)
		}
	}
	return nil
}

// ValidWeight checks a node weight for a signal or flag.
func ValidWeight(field string, w float64) error {
	if err := ring.ValidWeight(w); err != nil {
		return fieldErr(field, "%v", err)
	}
	return nil
}

func defaultInt(v *int, def int) {
	if *v == 0 {
		*v = def
	}
}

func defaultDuration(v *Duration, def time.Duration) {
	if *v == 0 {
		*v = Duration(def)
	}
}

func durationIn(add func(error), field string, d Duration, lo, hi time.Duration) {
	if d.D() < lo || d.D() > hi {
		add(fieldErr(field, "must be between %v and %v, got %v", lo, hi, d.D()))
	}
}

// unwrapParse drops the "parse URL ..." prefix crawl adds, since the field
// error already quotes the URL.
func unwrapParse(err error) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		return msg[i+2:]
	}
	return msg
}
