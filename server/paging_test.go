package server

import (
	"context"
	"fmt"
	"iter"
	"slices"
	"testing"

	pb "graveler/api/graveler/v1"
	"graveler/graveler"
)

// historyService serves a linear history c09 -> ... -> c00 and a sorted
// diff, to test the server's paging on its own.
type historyService struct {
	fakeService
	commits []graveler.CommitID // oldest first
	diffs   []*graveler.Diff
}

func (h *historyService) GetCommit(ctx context.Context, repo graveler.RepositoryID, ref graveler.Ref) (*graveler.CommitRecord, error) {
	if ref == "main" {
		ref = graveler.Ref(h.commits[len(h.commits)-1])
	}
	for _, c := range h.commits {
		if graveler.Ref(c) == ref {
			return &graveler.CommitRecord{CommitID: c, Commit: &graveler.Commit{}}, nil
		}
	}
	return nil, graveler.ErrCommitNotFound
}

func (h *historyService) Log(ctx context.Context, repo graveler.RepositoryID, ref graveler.Ref, opts graveler.LogOptions) iter.Seq2[*graveler.CommitRecord, error] {
	return func(yield func(*graveler.CommitRecord, error) bool) {
		i := slices.Index(h.commits, graveler.CommitID(ref))
		if i < 0 {
			yield(nil, graveler.ErrRefNotFound)
			return
		}
		for ; i >= 0; i-- {
			if !yield(&graveler.CommitRecord{CommitID: h.commits[i], Commit: &graveler.Commit{}}, nil) {
				return
			}
		}
	}
}

type sliceDiffs struct {
	d   []*graveler.Diff
	pos int
}

func (s *sliceDiffs) Next() bool            { s.pos++; return s.pos < len(s.d) }
func (s *sliceDiffs) Value() *graveler.Diff { return s.d[s.pos] }
func (s *sliceDiffs) Err() error            { return nil }
func (s *sliceDiffs) Close()                {}
func (s *sliceDiffs) SeekGE(k graveler.Key) {
	s.pos = -1
	for s.pos+1 < len(s.d) && s.d[s.pos+1].Key.Compare(k) < 0 {
		s.pos++
	}
}

func (h *historyService) Diff(ctx context.Context, repo graveler.RepositoryID, l, r graveler.Ref) (graveler.DiffIterator, error) {
	return &sliceDiffs{d: h.diffs, pos: -1}, nil
}

func TestLogAndDiffPaging(t *testing.T) {
	h := &historyService{}
	for i := range 10 {
		h.commits = append(h.commits, graveler.CommitID(fmt.Sprintf("c%02d", i)))
		h.diffs = append(h.diffs, &graveler.Diff{Type: graveler.DiffTypeAdded, Key: graveler.Key(fmt.Sprintf("k%02d", i)), Value: &graveler.Value{Identity: []byte("x")}})
	}
	hs := start(t, h, GRPCOptions{})
	ctx := context.Background()
	for _, fp := range []bool{false, true} {
		var got []string
		req := &pb.LogRequest{Repository: "repositories/repo1", Ref: "main", FirstParent: fp, PageSize: 3}
		pages := 0
		for {
			r, err := hs.client.Log(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			pages++
			for _, c := range r.GetCommits() {
				got = append(got, c.GetId())
			}
			if req.PageToken = r.GetNextPageToken(); req.PageToken == "" {
				break
			}
		}
		want := []string{"c09", "c08", "c07", "c06", "c05", "c04", "c03", "c02", "c01", "c00"}
		if !slices.Equal(got, want) || pages != 4 {
			t.Fatalf("first_parent=%v: %d pages %v", fp, pages, got)
		}
	}
	var keys []string
	req := &pb.DiffRequest{Repository: "repositories/repo1", LeftRef: "a", RightRef: "b", PageSize: 4}
	for {
		r, err := hs.client.Diff(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range r.GetDifferences() {
			keys = append(keys, string(d.GetKey()))
		}
		if req.PageToken = r.GetNextPageToken(); req.PageToken == "" {
			break
		}
	}
	if len(keys) != 10 || keys[0] != "k00" || keys[9] != "k09" || !slices.IsSorted(keys) {
		t.Fatalf("diff pages: %v", keys)
	}
}
