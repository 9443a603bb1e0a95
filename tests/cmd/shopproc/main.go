// Command shopproc is the shop example's processor made slow, for chaos
// tests: each page takes PAGE_DELAY (a Go duration) before its extraction,
// so a batch is surely in flight when the process is killed.
package main

import (
	"context"
	"log"
	"os"
	"time"

	"github.com/spiderpool/spiderpool/examples/shop-go/products"
	"github.com/spiderpool/spiderpool/processor"
)

func main() {
	delay, err := time.ParseDuration(os.Getenv("PAGE_DELAY"))
	if err != nil {
		log.Fatalf("PAGE_DELAY: %v", err)
	}
	p := processor.New(products.Name).Queue(os.Getenv("PROCESSOR_QUEUE"))
	p.OnPage(func(*processor.Page) error { time.Sleep(delay); return nil })
	products.Register(p)
	if err := p.Run(context.Background()); err != nil {
		log.Fatal(err)
	}
}
