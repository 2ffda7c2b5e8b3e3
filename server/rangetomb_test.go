package server

import (
	"fmt"
	"io"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"

	pb "graveler/api/graveler/v1"
	"graveler/etcdkv/etcdkvtest"
	"graveler/graveler"
	"graveler/graveler/gravelertest"
	"graveler/graveler/staging"
)

// TestDeletePrefixAndShortPagesOverGRPC: DeletePrefix over the wire, its
// limit as RESOURCE_EXHAUSTED, and ListEntries pages that tombstones cut
// short (even empty) while next_page_token goes on, also inside a common
// prefix; StreamEntries sends every live key once.
func TestDeletePrefixAndShortPagesOverGRPC(t *testing.T) {
	store := etcdkvtest.NewStore(t)
	svc := gravelertest.New(t, store, gravelertest.Options{
		Graveler: graveler.Config{ListPageBudget: 50},
		Staging:  staging.Config{MaxRangeTombstones: 2},
	})
	h := start(t, svc, GRPCOptions{})
	ctx := t.Context()
	if _, err := h.client.CreateRepository(ctx, &pb.CreateRepositoryRequest{RepositoryId: "rng"}); err != nil {
		t.Fatal(err)
	}
	branch := "repositories/rng/branches/main"
	var recs []*graveler.ValueRecord
	for i := range 300 {
		recs = append(recs, &graveler.ValueRecord{Key: graveler.Key(fmt.Sprintf("d/x/%03d", i))}) // tombstones
	}
	for _, k := range []string{"a", "d/x/zz", "d/y", "p/1", "p/2"} {
		recs = append(recs, &graveler.ValueRecord{Key: graveler.Key(k), Value: &graveler.Value{Identity: []byte(k)}})
	}
	if err := svc.SetBatch(ctx, "rng", "main", recs); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.DeletePrefix(ctx, &pb.DeletePrefixRequest{Branch: branch, Prefix: []byte("p/")}); err != nil {
		t.Fatal(err)
	}

	list := func(delimiter string) (rows []string, short int) {
		token := ""
		for {
			r, err := h.client.ListEntries(ctx, &pb.ListEntriesRequest{Repository: "repositories/rng", Ref: "main", Delimiter: []byte(delimiter), PageSize: 2, PageToken: token})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range r.GetEntries() {
				rows = append(rows, string(e.GetKey()))
			}
			if token = r.GetNextPageToken(); token == "" {
				return rows, short
			}
			if len(r.GetEntries()) < 2 {
				short++
			}
		}
	}
	rows, short := list("")
	if want := []string{"a", "d/x/zz", "d/y"}; !slices.Equal(rows, want) || short == 0 {
		t.Fatalf("pages = %q with %d short pages, want %q with short pages", rows, short, want)
	}
	rows, short = list("/")
	if want := []string{"a", "d/"}; !slices.Equal(rows, want) || short == 0 {
		t.Fatalf("pages with a delimiter = %q with %d short pages, want %q with short pages", rows, short, want)
	}

	s, err := h.client.StreamEntries(ctx, &pb.StreamEntriesRequest{Repository: "repositories/rng", Ref: "main"})
	if err != nil {
		t.Fatal(err)
	}
	var streamed []string
	for {
		m, err := s.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range m.GetEntries() {
			streamed = append(streamed, string(e.GetKey()))
		}
	}
	if want := []string{"a", "d/x/zz", "d/y"}; !slices.Equal(streamed, want) {
		t.Fatalf("streamed %q, want %q", streamed, want)
	}

	if _, err := h.client.DeletePrefix(ctx, &pb.DeletePrefixRequest{Branch: branch, Prefix: []byte("q/")}); err != nil {
		t.Fatal(err)
	}
	_, err = h.client.DeletePrefix(ctx, &pb.DeletePrefixRequest{Branch: branch, Prefix: []byte("r/")})
	if c, reason, _ := reasonOf(t, err); c != codes.ResourceExhausted || reason != "TOO_MANY_RANGE_TOMBSTONES" {
		t.Fatalf("over the limit: %v %s, want RESOURCE_EXHAUSTED TOO_MANY_RANGE_TOMBSTONES", c, reason)
	}
	_, err = h.client.DeletePrefix(ctx, &pb.DeletePrefixRequest{Branch: "repositories/rng/branches/nope", Prefix: []byte("p/")})
	if c, reason, _ := reasonOf(t, err); c != codes.NotFound || reason != "BRANCH_NOT_FOUND" {
		t.Fatalf("unknown branch: %v %s", c, reason)
	}
}
