// Package crawler is a node's crawl engine. Its puller (Puller) takes the
// batches routed to the node's identities from Postgres; its engine (Fetch)
// claims their URLs and runs them through one queue per host, shared by
// every campaign on the node, at the host's pace (hosts.go), under a
// node-wide cap shared fairly among campaigns (slots.go), with robots.txt,
// seen-URL and rule caches; it fetches each page through a PageFetcher
// (plain HTTP by default), and commits outcomes, links and bodies for
// processors per campaign in chunks (commit.go). Nothing here is a Temporal
// activity: the campaign's workflow sees only what Postgres says.
package crawler
