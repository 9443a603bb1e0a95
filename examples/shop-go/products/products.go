// Package products is the shop example's extraction: each product page
// (div.product) gives one item.
package products

import "github.com/spiderpool/spiderpool/processor"

// Name is the processor's name and activity type.
const Name = "products"

// Register adds the extraction to p.
func Register(p *processor.Processor) {
	p.OnHTML("div.product", func(e *processor.Element) error {
		return e.Page.Item(map[string]string{
			"sku":   e.Attr("data-sku"),
			"name":  e.ChildText(".name"),
			"price": e.ChildText(".price"),
		})
	})
}
