package server

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "graveler/api/graveler/v1"
	"graveler/graveler"
)

// TestParseChildAsSplit: parseChild accepts exactly the names that split
// on "/" into repositories/{repository}/{collection}/{id}, both non-empty.
func TestParseChildAsSplit(t *testing.T) {
	names := []string{
		"repositories/repo1/branches/main", "repositories/repo1/branches/", "repositories//branches/main",
		"repositories/repo1/branches/main/", "repositories/repo1/branches/a/b", "repositories/repo1/tags/main",
		"repositories/repo1/branches", "repositories/repo1", "repositories/", "repositories", "",
		"/repositories/repo1/branches/main", "repository/repo1/branches/main", "repositories/repo1//main",
		"repositories/repo1/branches//", "repositories/Bad_Repo/branches/main", "repositories/r/branches/main",
		"repositories/repo1/branchesx/main", "xrepositories/repo1/branches/main",
	}
	for _, name := range names {
		parts := strings.Split(name, "/")
		wantOK := len(parts) == 4 && parts[0] == collRepositories && parts[2] == collBranches && parts[1] != "" && parts[3] != ""
		repo, id, err := parseChild(name, collBranches)
		if !wantOK {
			if err == nil {
				t.Errorf("parseChild(%q) = %q, %q; want an error", name, repo, id)
			}
			continue
		}
		if rerr := graveler.ValidateRepositoryID(graveler.RepositoryID(parts[1])); rerr != nil {
			if err == nil {
				t.Errorf("parseChild(%q): want the repository id's error %v", name, rerr)
			}
			continue
		}
		if err != nil || string(repo) != parts[1] || id != parts[3] {
			t.Errorf("parseChild(%q) = %q, %q, %v; want %q, %q", name, repo, id, err, parts[1], parts[3])
		}
	}
}

// TestLongRefIsInvalidArgument: a ref expression over graveler.MaxRefLen,
// however far under the 4 MiB request limit, is refused as INVALID_ARGUMENT
// / INVALID_REF, as a short invalid one is.
func TestLongRefIsInvalidArgument(t *testing.T) {
	ctx := context.Background()
	c := largeRepo(t)
	for _, n := range []int{64, graveler.MaxRefLen + 1, 2 << 20, 3<<20 + 512<<10} {
		ref := strings.Repeat("\x01", n)
		_, err := c.GetEntry(ctx, &pb.GetEntryRequest{Repository: "repositories/repo", Ref: ref, Key: []byte("k")})
		if code, reason := codeAndReason(t, err); code != codes.InvalidArgument || reason != "INVALID_REF" {
			t.Errorf("ref of %d bytes: %v / %q, want InvalidArgument / INVALID_REF (%.120v)", n, code, reason, err)
		}
	}
	long := "main" + strings.Repeat("~1", (graveler.MaxRefLen-4)/2)
	if _, err := c.GetEntry(ctx, &pb.GetEntryRequest{Repository: "repositories/repo", Ref: long, Key: []byte("k")}); err != nil {
		if code, reason := codeAndReason(t, err); reason == "INVALID_REF" {
			t.Errorf("a valid ref of %d bytes: %v / %s", len(long), code, reason)
		}
	}
}

// TestOversizedNameKeepsOtherCalls: one malformed request does not fail the
// other calls in flight on its connection (its error, echoing the name, used
// to outgrow what the client takes and tear the connection down).
func TestOversizedNameKeepsOtherCalls(t *testing.T) {
	ctx := context.Background()
	c := largeRepo(t)
	for i := range 40 {
		putLarge(t, c, i, 500<<10)
	}
	s, err := c.StreamEntries(ctx, &pb.StreamEntriesRequest{Repository: "repositories/repo", Ref: "main"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	_, bad := c.GetCommit(ctx, &pb.GetCommitRequest{Name: "repositories/repo/commits/" + strings.Repeat("\x01", 3<<20)})
	if code, reason := codeAndReason(t, bad); code != codes.InvalidArgument || reason != "INVALID_REF" {
		t.Errorf("GetCommit of a 3 MiB name: %v / %q, want InvalidArgument / INVALID_REF", code, reason)
	}
	for {
		_, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatalf("a concurrent StreamEntries on the same connection failed: %v", err)
		}
	}
}

// TestErrorsEchoBoundedInput: whatever a request's invalid value, the error
// message and the ErrorInfo metadata that repeat it stay small, and the
// error keeps its ErrorInfo.
func TestErrorsEchoBoundedInput(t *testing.T) {
	ctx := context.Background()
	c := largeRepo(t)
	big := strings.Repeat("\x01", 3<<20) // 12 MiB once quoted
	calls := map[string]func() error{
		"GetEntry ref": func() error {
			_, err := c.GetEntry(ctx, &pb.GetEntryRequest{Repository: "repositories/repo", Ref: big, Key: []byte("k")})
			return err
		},
		"GetEntry key": func() error {
			_, err := c.GetEntry(ctx, &pb.GetEntryRequest{Repository: "repositories/repo", Ref: "main", Key: []byte(big)})
			return err
		},
		"GetCommit name": func() error {
			_, err := c.GetCommit(ctx, &pb.GetCommitRequest{Name: "repositories/repo/commits/" + big})
			return err
		},
		"GetBranch name": func() error {
			_, err := c.GetBranch(ctx, &pb.GetBranchRequest{Name: "repositories/repo/branches/" + big})
			return err
		},
		"GetRepository name": func() error {
			_, err := c.GetRepository(ctx, &pb.GetRepositoryRequest{Name: "repositories/" + big})
			return err
		},
		"GetTag name": func() error {
			_, err := c.GetTag(ctx, &pb.GetTagRequest{Name: big})
			return err
		},
		"CreateRepository id": func() error {
			_, err := c.CreateRepository(ctx, &pb.CreateRepositoryRequest{RepositoryId: big})
			return err
		},
		"CreateRepository namespace": func() error {
			_, err := c.CreateRepository(ctx, &pb.CreateRepositoryRequest{RepositoryId: "other",
				Repository: &pb.Repository{StorageNamespace: "mem://" + big}})
			return err
		},
		"CreateBranch source": func() error {
			_, err := c.CreateBranch(ctx, &pb.CreateBranchRequest{Parent: "repositories/repo", BranchId: "b", SourceRef: big})
			return err
		},
		"CreateTag id": func() error {
			_, err := c.CreateTag(ctx, &pb.CreateTagRequest{Parent: "repositories/repo", TagId: big, Ref: "main"})
			return err
		},
		"Diff refs": func() error {
			_, err := c.Diff(ctx, &pb.DiffRequest{Repository: "repositories/repo", LeftRef: big[:1<<20], RightRef: big[:1<<20]})
			return err
		},
		"Merge source": func() error {
			_, err := c.Merge(ctx, &pb.MergeRequest{Destination: largeBranch, SourceRef: big})
			return err
		},
		"DeletePrefix prefix": func() error {
			_, err := c.DeletePrefix(ctx, &pb.DeletePrefixRequest{Branch: largeBranch, Prefix: []byte(big)})
			return err
		},
	}
	for name, call := range calls {
		err := call()
		st := status.Convert(err)
		code, reason := codeAndReason(t, err)
		if code != codes.InvalidArgument || reason == "" {
			t.Errorf("%s: %v / %q, want InvalidArgument with an ErrorInfo (%.200v)", name, code, reason, err)
			continue
		}
		meta := 0
		for _, d := range st.Details() {
			if ei, ok := d.(*errdetails.ErrorInfo); ok {
				for k, v := range ei.GetMetadata() {
					meta += len(k) + len(v)
				}
			}
		}
		if len(st.Message()) > 4<<10 || meta > 8<<10 {
			t.Errorf("%s: a %d-byte message and %d bytes of metadata", name, len(st.Message()), meta)
		}
	}
}
