package campaign

// AddURLs is the update that adds URLs to a running campaign
// (AddURLsRequest -> AddURLsResult). Each URL is checked and stored as a
// link would be: canonicalized, scoped, deduplicated; a new one is
// fetched under the campaign's politeness and robots.txt like any other.
const AddURLs = "add_urls"

// AddURLsActivity checks and stores the URLs of an AddURLs update.
const AddURLsActivity = "AddURLs"

// MaxAddURLs bounds the URLs of one AddURLs update, so that its request
// and answer stay far below Temporal's payload limit.
const MaxAddURLs = 5000

// MaxPriority is the highest priority a URL can be added with.
const MaxPriority = 1000

// AddURLsRequest is the AddURLs update's argument, as the Temporal CLI
// sends it: --input '{"urls": ["https://example.com/a"], "priority": 10}'.
// Priority (0..MaxPriority, default 0, every other URL's) puts the URLs
// ahead of their host's pending URLs of lower priority; it raises the
// priority of URLs already pending too.
type AddURLsRequest struct {
	URLs     []string `json:"urls"`
	Priority int      `json:"priority,omitempty"`
}

// What an added URL turned out to be.
const (
	AddedNew        = "new"          // stored; it will be fetched
	AddedDuplicate  = "duplicate"    // the campaign knows it already (or it came twice)
	AddedOutOfScope = "out_of_scope" // the campaign's scope refuses it; Reason says why
	AddedInvalid    = "invalid"      // not an http(s) URL; Reason says why
)

// AddedURL is one URL of an AddURLs update and what became of it. URL is
// as given; Canonical is the form the campaign keeps.
type AddedURL struct {
	URL       string `json:"url"`
	Result    string `json:"result"`
	Canonical string `json:"canonical,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

// AddURLsResult answers an AddURLs update: each URL in the order given,
// and the counts.
type AddURLsResult struct {
	New        int        `json:"new"`
	Duplicate  int        `json:"duplicate"`
	OutOfScope int        `json:"out_of_scope"`
	Invalid    int        `json:"invalid"`
	URLs       []AddedURL `json:"urls"`
}

// Count tallies r.URLs into the counts.
func (r *AddURLsResult) Count() {
	r.New, r.Duplicate, r.OutOfScope, r.Invalid = 0, 0, 0, 0
	for _, u := range r.URLs {
		switch u.Result {
		case AddedNew:
			r.New++
		case AddedDuplicate:
			r.Duplicate++
		case AddedOutOfScope:
			r.OutOfScope++
		case AddedInvalid:
			r.Invalid++
		}
	}
}

// AddURLsActivityRequest is what the AddURLs update asks of its activity.
type AddURLsActivityRequest struct {
	CampaignKey int64    `json:"campaign_key"`
	CampaignID  string   `json:"campaign_id"`
	URLs        []string `json:"urls"`
	Priority    int      `json:"priority,omitempty"`
	// RequestID names the update (its run and update ID): the URLs it
	// stored count as new when the activity runs again after its insert
	// committed. Empty (a run from before it), the activity's own run and
	// ID stand for it.
	RequestID string `json:"request_id,omitempty"`
}
