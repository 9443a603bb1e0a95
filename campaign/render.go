package campaign

import (
	"slices"
	"strings"
	"time"
)

// CapBrowser: the node renders pages in a browser (spiderpool worker
// --browser). Render hosts are routed only to such nodes.
const CapBrowser = "browser"

// Render says which pages need a browser, and how each is rendered.
//
// The unit is the host (as Scope.ShardBy keys it): a render host is
// routed, by the same weighted consistent hash, only over the nodes that
// have a browser, so its politeness stays with one node; on that node,
// its pages that match Include are rendered, the rest fetched plainly.
// With no node that has a browser, a render host's pages wait; they are
// never failed for it.
type Render struct {
	// Hosts are the render hosts: host[:port] (the shard keys of
	// shard_by "host") or domains (of shard_by "domain"). "*" is every
	// host.
	Hosts []string `json:"hosts,omitempty"`
	// Include, when set, renders only the pages of a render host whose
	// canonical URL matches one of these regular expressions; the others
	// are fetched plainly. Default: every HTML page of a render host.
	Include []string `json:"include,omitempty"`
	// Auto renders a page of a render host (that matches Include, if set)
	// only when its HTML as served is a script shell (render.IsScriptShell:
	// a script, and almost no text or an empty framework mount); any
	// other page is kept as fetched and uses no tab. The node learns it
	// only from the page it fetched, so the routing does not change: a
	// render host still goes to browser nodes alone.
	Auto bool `json:"auto,omitempty"`
	// Wait is what a render waits for after the page's load event:
	// "network_idle" (default: no request in flight for 500ms, waited for
	// at most IdleCap) or "load" (nothing more).
	Wait string `json:"wait,omitempty"`
	// IdleCap caps the wait for the network to go idle. Default 5s.
	IdleCap Duration `json:"idle_cap,omitzero"`
	// Timeout caps one page's render, from navigation to the DOM taken.
	// A page that takes longer (a script that never ends) fails with
	// that reason. Default 30s.
	Timeout Duration `json:"timeout,omitzero"`
	// Scroll, when Steps > 0, scrolls the page a screen at a time, waiting
	// for the network to go idle (at most Scroll.Wait) after each step,
	// until the page grows no more or Steps is reached: lazy images and
	// infinite lists load.
	Scroll Scroll `json:"scroll,omitzero"`
	// Screenshot, when true, archives a picture of each rendered page,
	// taken once it settled and scrolled back to its top: the viewport
	// in PNG (WARC resource record urn:view:URL) and at half size in
	// JPEG (urn:thumbnail:URL, which ReplayWeb.page shows in its list of
	// pages), as Browsertrix records them. Default false.
	Screenshot bool `json:"screenshot,omitempty"`
	// Tabs caps the campaign's pages a node renders at once (0..64);
	// the node's own cap (spiderpool worker --browser-tabs) still holds
	// over all its campaigns. Default 0: the node's cap alone.
	Tabs int `json:"tabs,omitempty"`
}

// Scroll is the autoscroll behavior of a render.
type Scroll struct {
	// Steps caps the scroll steps of one page. Default 0: no scrolling.
	Steps int `json:"steps,omitempty"`
	// Wait caps the wait for the network after each step. Default 2s.
	Wait Duration `json:"wait,omitzero"`
}

// Render waits.
const (
	RenderWaitLoad        = "load"
	RenderWaitNetworkIdle = "network_idle"
)

// RendersHost reports whether key (a shard key) is a render host.
func (r *Render) RendersHost(key string) bool {
	if r == nil {
		return false
	}
	return slices.Contains(r.Hosts, "*") || slices.Contains(r.Hosts, strings.ToLower(key))
}

func (s *Spec) normalizeRender(add func(error)) {
	r := s.Render
	if r == nil {
		return
	}
	if len(r.Hosts) == 0 {
		add(fieldErr("spec.render.hosts", "name the hosts whose pages need a browser (\"*\" for every host)"))
	}
	normalizeHosts(add, "spec.render.hosts", r.Hosts, `a host[:port], a domain or "*"`)
	checkPatterns(add, "spec.render.include", r.Include)
	switch r.Wait {
	case "":
		r.Wait = RenderWaitNetworkIdle
	case RenderWaitLoad, RenderWaitNetworkIdle:
	default:
		add(fieldErr("spec.render.wait", "want %q or %q, got %q", RenderWaitNetworkIdle, RenderWaitLoad, r.Wait))
	}
	defaultDuration(&r.IdleCap, 5*time.Second)
	defaultDuration(&r.Timeout, 30*time.Second)
	defaultDuration(&r.Scroll.Wait, 2*time.Second)
	durationIn(add, "spec.render.idle_cap", r.IdleCap, 10*time.Millisecond, 5*time.Minute)
	durationIn(add, "spec.render.timeout", r.Timeout, 100*time.Millisecond, 10*time.Minute)
	durationIn(add, "spec.render.scroll.wait", r.Scroll.Wait, 10*time.Millisecond, time.Minute)
	if r.Scroll.Steps < 0 || r.Scroll.Steps > 1000 {
		add(fieldErr("spec.render.scroll.steps", "must be 0..1000, got %d", r.Scroll.Steps))
	}
	if r.Tabs < 0 || r.Tabs > 64 {
		add(fieldErr("spec.render.tabs", "must be 0..64 (0: the node's --browser-tabs), got %d", r.Tabs))
	}
}
