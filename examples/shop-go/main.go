// Command shop-go is a spiderpool processor in Go: it takes each product
// page of a shop and returns the product as an item (see package
// products for the extraction itself).
//
//	go run ./examples/shop-go          # polls spiderpool.processor.products
//
// and in the campaign spec:
//
//	"processors": [{"name": "products", "task_queue": "spiderpool.processor.products", "activity": "products"}]
//
// It connects to Temporal as the spiderpool CLI does (TEMPORAL_ADDRESS,
// TEMPORAL_NAMESPACE, ...). PROCESSOR_QUEUE overrides the task queue.
package main

import (
	"context"
	"log"
	"os"

	"github.com/spiderpool/spiderpool/examples/shop-go/products"
	"github.com/spiderpool/spiderpool/processor"
)

func main() {
	p := processor.New(products.Name)
	if q := os.Getenv("PROCESSOR_QUEUE"); q != "" {
		p.Queue(q)
	}
	products.Register(p)
	if err := p.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
}
