package synthweb

import (
	"fmt"
	"html"
	"net/http"
	"strconv"
	"strings"
)

// Product is one product of the synthetic shop: the ground truth a
// processor's items must equal. JSON names match the example processors'
// items.
type Product struct {
	SKU   string `json:"sku"`
	Name  string `json:"name"`
	Price string `json:"price"`
}

// ShopRoot is where the shop's index is, on the host it is mounted on.
const ShopRoot = "/shop/"

// perCategory is how many products a category page lists.
const perCategory = 50

// Shop is a synthetic shop: an index, category pages and product pages,
// where only product pages hold a product (div.product with data-sku,
// .name and .price). Names carry markup-worthy characters (&, <, quotes)
// and non-ASCII letters, so extraction must decode entities.
type Shop struct {
	Products []Product
}

// NewShop builds a shop of pages pages in all (index, categories and
// products; at least 3).
func NewShop(pages int) *Shop {
	// 1 index + c categories + p products = pages, c = ceil(p/perCategory).
	p := pages - 1
	for p+(p+perCategory-1)/perCategory > pages-1 {
		p--
	}
	adjectives := []string{"Café", "Über", "Deluxe", "Tiny & Tidy", `"Pro"`, "<Mini>", "Ñandú", "Grand"}
	nouns := []string{"Widget", "Gadget", "Teapot", "Lamp", "Kettle", "Chair"}
	s := &Shop{}
	for i := range p {
		s.Products = append(s.Products, Product{
			SKU:   fmt.Sprintf("P%05d", i+1),
			Name:  fmt.Sprintf("%s %s %d", adjectives[i%len(adjectives)], nouns[(i/len(adjectives))%len(nouns)], i+1),
			Price: fmt.Sprintf("%d.%02d", 1+(i*37)%500, (i*13)%100),
		})
	}
	return s
}

// Pages is how many pages the shop serves.
func (s *Shop) Pages() int { return 1 + s.categories() + len(s.Products) }

func (s *Shop) categories() int { return (len(s.Products) + perCategory - 1) / perCategory }

// Site serves the shop, to mount with Config.Custom, its index linked
// with Config.ExtraLinks (ShopRoot).
func (s *Shop) Site() map[string]http.HandlerFunc {
	return map[string]http.HandlerFunc{ShopRoot: s.serve}
}

func (s *Shop) serve(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.Path, ShopRoot)
	var b strings.Builder
	b.WriteString("<!doctype html><html><head><meta charset=utf-8><title>shop</title></head><body>\n")
	switch {
	case rest == "":
		for c := range s.categories() {
			fmt.Fprintf(&b, "<a href=\"c/%d.html\">category %d</a>\n", c, c)
		}
	case strings.HasPrefix(rest, "c/"):
		c, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(rest, "c/"), ".html"))
		if err != nil || c < 0 || c >= s.categories() {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(&b, "<ul class=\"listing\">\n")
		for i := c * perCategory; i < min((c+1)*perCategory, len(s.Products)); i++ {
			p := s.Products[i]
			// A listing shows name and price too, outside div.product: a
			// processor that takes them from here counts them twice.
			fmt.Fprintf(&b, "<li><a href=\"../p/%s.html\">%s</a> <span class=\"price\">%s</span></li>\n",
				p.SKU, html.EscapeString(p.Name), p.Price)
		}
		b.WriteString("</ul>\n")
	case strings.HasPrefix(rest, "p/"):
		sku := strings.TrimSuffix(strings.TrimPrefix(rest, "p/"), ".html")
		i, err := strconv.Atoi(strings.TrimPrefix(sku, "P"))
		if err != nil || i < 1 || i > len(s.Products) || s.Products[i-1].SKU != sku {
			http.NotFound(w, r)
			return
		}
		p := s.Products[i-1]
		fmt.Fprintf(&b, "<div class=\"product\" data-sku=\"%s\">\n  <h1 class=\"name\">%s</h1>\n  <p>Price: <span class=\"price\">%s</span> EUR</p>\n</div>\n",
			p.SKU, html.EscapeString(p.Name), p.Price)
		fmt.Fprintf(&b, "<a href=\"../c/%d.html\">back</a>\n", (i-1)/perCategory)
	default:
		http.NotFound(w, r)
		return
	}
	b.WriteString("</body></html>\n")
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write([]byte(b.String()))
}
