package campaign

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestProcessorsGetTheRenderedDocumentUnlessTheyAskForTheOriginal: a
// processor gets the rendered DOM of a rendered page unless its document
// is "original"; its spec stays as written (a campaign started before the
// field existed replays the same activity inputs); any other value is an
// error naming the field.
func TestProcessorsGetTheRenderedDocumentUnlessTheyAskForTheOriginal(t *testing.T) {
	s, err := normalize(t, `{"seeds":["http://a/"],"processors":[
		{"name":"shells","task_queue":"q","activity":"a","document":"original"},
		{"name":"views","task_queue":"q","activity":"a"},
		{"name":"said","task_queue":"q","activity":"a","document":"rendered"}]}`)
	if err != nil {
		t.Fatal(err)
	}
	if got := []string{s.Processors[0].Document, s.Processors[1].Document, s.Processors[2].Document}; !slices.Equal(got, []string{"original", "", "rendered"}) {
		t.Fatalf("normalised document = %q, want each as written", got)
	}
	filters, err := s.CompileFilters()
	if err != nil {
		t.Fatal(err)
	}
	if got := []bool{filters[0].WantsOriginal(), filters[1].WantsOriginal(), filters[2].WantsOriginal()}; !slices.Equal(got, []bool{true, false, false}) {
		t.Errorf("want the original: %v, want only the first", got)
	}

	_, err = normalize(t, `{"seeds":["http://a/"],"processors":[{"name":"p","task_queue":"q","activity":"a","document":"dom"}]}`)
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "spec.processors[0].document" || !strings.Contains(fe.Error(), `want "rendered" or "original", got "dom"`) {
		t.Errorf("document \"dom\": %v, want an error naming spec.processors[0].document", err)
	}
}
