package crawler

import (
	"fmt"
	"regexp"
	"strconv"

	"github.com/spiderpool/spiderpool/campaign"
	"github.com/spiderpool/spiderpool/crawl"
	"github.com/spiderpool/spiderpool/fetch"
)

// renderRules are a campaign's spec.render, compiled: which pages a
// browser renders, and how. The store routes render hosts only to browser
// nodes, so a node that reads them has a browser (FetchOptions.Pages); a
// node without one fetches plainly what it is given.
type renderRules struct {
	spec    *campaign.Render
	include []*regexp.Regexp
}

func compileRender(r *campaign.Render) (*renderRules, error) {
	if r == nil {
		return nil, nil
	}
	rr := &renderRules{spec: r}
	for i, p := range r.Include {
		re, err := regexp.Compile(p)
		if err != nil {
			return nil, fmt.Errorf("spec.render.include[%d]: %w", i, err)
		}
		rr.include = append(rr.include, re)
	}
	return rr, nil
}

// renders reports whether the page url of the host key is rendered: its
// host renders, and the page matches include (if any).
func (rr *renderRules) renders(key, url string) bool {
	if rr == nil || !rr.spec.RendersHost(key) {
		return false
	}
	if len(rr.include) == 0 {
		return true
	}
	for _, re := range rr.include {
		if re.MatchString(url) {
			return true
		}
	}
	return false
}

// options are a render's fetch options.
func (rr *renderRules) options(campaignKey int64, check func(string) error) *fetch.Render {
	s := rr.spec
	return &fetch.Render{
		Auto:        s.Auto,
		NetworkIdle: s.Wait == campaign.RenderWaitNetworkIdle,
		IdleCap:     s.IdleCap.D(),
		Timeout:     s.Timeout.D(),
		ScrollSteps: s.Scroll.Steps,
		ScrollWait:  s.Scroll.Wait.D(),
		Check:       check,
		Screenshot:  s.Screenshot,
		Group:       strconv.FormatInt(campaignKey, 10),
		Tabs:        s.Tabs,
	}
}

// errRobots refuses a rendered page's request that robots.txt disallows.
type errRobots struct{ url string }

func (e errRobots) Error() string { return "robots.txt disallows " + e.url }

// renderCheck vets the requests a rendered page makes beyond itself by
// robots.txt, as its own URLs are: a request to an origin whose
// robots.txt this node holds and disallows it is refused. An origin it
// has not read (a CDN, say) is not fetched for it: a page's resources
// are not pages, and its render must not wait on another host's file.
func (f *Fetch) renderCheck(r *rules) func(string) error {
	if r.spec.Politeness.IgnoreRobots {
		return nil
	}
	return func(raw string) error {
		u, err := crawl.Canonicalize(raw)
		if err != nil {
			return err
		}
		if rf, ok := f.robots.cached(r, u.Origin()); ok && rf.robots != nil && !rf.robots.Allowed(u, r.agent) {
			return errRobots{raw}
		}
		return nil
	}
}
