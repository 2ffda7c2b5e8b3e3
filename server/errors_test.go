package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "graveler/api/graveler/v1"
	"graveler/graveler"
	"graveler/graveler/gcfence"
	"graveler/kv"
)

func errorInfo(t *testing.T, st *status.Status) *errdetails.ErrorInfo {
	t.Helper()
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei
		}
	}
	t.Fatalf("status %v has no ErrorInfo", st)
	return nil
}

func TestToStatusCodesAndReasons(t *testing.T) {
	cases := []struct {
		err    error
		code   codes.Code
		reason string
	}{
		{graveler.ErrRepositoryNotFound, codes.NotFound, "REPOSITORY_NOT_FOUND"},
		{graveler.ErrBranchNotFound, codes.NotFound, "BRANCH_NOT_FOUND"},
		{graveler.ErrEntryNotFound, codes.NotFound, "ENTRY_NOT_FOUND"},
		{graveler.ErrNotFound, codes.NotFound, "NOT_FOUND"},
		{graveler.ErrRepositoryExists, codes.AlreadyExists, "REPOSITORY_ALREADY_EXISTS"},
		{graveler.ErrTagExists, codes.AlreadyExists, "TAG_ALREADY_EXISTS"},
		{graveler.ErrInvalidBranchID, codes.InvalidArgument, "INVALID_BRANCH_ID"},
		{ErrInvalidPageToken, codes.InvalidArgument, "INVALID_PAGE_TOKEN"},
		{ErrInvalidName, codes.InvalidArgument, "INVALID_RESOURCE_NAME"},
		{ErrInvalidField, codes.InvalidArgument, "INVALID_FIELD"},
		{graveler.ErrBranchHeadMoved, codes.Aborted, "BRANCH_HEAD_MOVED"},
		{graveler.ErrTooManyRetries, codes.Aborted, "TOO_MANY_RETRIES"},
		{kv.ErrPredicateFailed, codes.Aborted, "CONCURRENT_UPDATE"},
		{graveler.ErrAmbiguous, codes.Aborted, "OUTCOME_UNKNOWN"},
		{kv.ErrAmbiguous, codes.Aborted, "OUTCOME_UNKNOWN"},
		{graveler.ErrMergeConflict, codes.FailedPrecondition, "MERGE_CONFLICT"},
		{graveler.ErrRepositoryDeleting, codes.FailedPrecondition, "REPOSITORY_DELETING"},
		{graveler.ErrDirtyBranch, codes.FailedPrecondition, "DIRTY_BRANCH"},
		{graveler.ErrNoChanges, codes.FailedPrecondition, "NO_CHANGES"},
		{fmt.Errorf("commit: %w", gcfence.ErrSwept), codes.Unavailable, "CONCURRENT_GC_SWEEP"},
		{graveler.ErrUnavailable, codes.Unavailable, "STORE_UNAVAILABLE"},
		{kv.ErrUnavailable, codes.Unavailable, "STORE_UNAVAILABLE"},
		{kv.ErrQuotaExceeded, codes.ResourceExhausted, "STORE_QUOTA_EXCEEDED"},
		{context.DeadlineExceeded, codes.DeadlineExceeded, "DEADLINE_EXCEEDED"},
		{context.Canceled, codes.Canceled, "CANCELED"},
		{ErrUnauthenticated, codes.Unauthenticated, "UNAUTHENTICATED"},
		{errors.New("disk on fire at /secret/path"), codes.Internal, "INTERNAL"},
	}
	for _, c := range cases {
		t.Run(c.reason, func(t *testing.T) {
			wrapped := withResource(fmt.Errorf("op: %w", c.err), "repository", "repositories/r1")
			st := ToStatus(wrapped, "rid-1")
			if st.Code() != c.code {
				t.Fatalf("code = %v, want %v (err %v)", st.Code(), c.code, c.err)
			}
			ei := errorInfo(t, st)
			if ei.GetReason() != c.reason || ei.GetDomain() != ErrorDomain {
				t.Fatalf("ErrorInfo = %v, want reason %s", ei, c.reason)
			}
			if ei.GetMetadata()["requestId"] != "rid-1" {
				t.Fatalf("metadata %v lacks the request id", ei.GetMetadata())
			}
			if c.code == codes.Internal {
				if strings.Contains(st.Message(), "secret") || ei.GetMetadata()["repository"] != "" {
					t.Fatalf("internal error leaks: %q %v", st.Message(), ei.GetMetadata())
				}
				return
			}
			if ei.GetMetadata()["repository"] != "repositories/r1" {
				t.Fatalf("metadata %v lacks the resource", ei.GetMetadata())
			}
		})
	}
}

// TestUnknownOutcomeWinsOverWhatItWraps: an unknown outcome that carries
// the error of the read that could not settle it (a commit recorded, then
// its repository deleted before the read-back) is ABORTED /
// OUTCOME_UNKNOWN, as its message says, whatever that read failed with:
// NOT_FOUND or INVALID_ARGUMENT would tell the client not to retry and
// hide that the write may have applied.
func TestUnknownOutcomeWinsOverWhatItWraps(t *testing.T) {
	for _, read := range []error{
		fmt.Errorf("%w: r1", graveler.ErrRepositoryNotFound),
		fmt.Errorf("%w: c1", graveler.ErrCommitNotFound),
		graveler.ErrAlreadyExists,
		graveler.ErrInvalidArgument,
		graveler.ErrRepositoryDeleting,
		kv.ErrValueTooLarge,
	} {
		for _, amb := range []error{graveler.ErrAmbiguous, kv.ErrAmbiguous} {
			err := withResource(fmt.Errorf("%w: recorded as commit c1, but reading it back failed: %w", amb, read), "repository", "repositories/r1")
			st := ToStatus(err, "rid")
			if ei := errorInfo(t, st); st.Code() != codes.Aborted || ei.GetReason() != "OUTCOME_UNKNOWN" {
				t.Errorf("%v: %v / %s, want Aborted / OUTCOME_UNKNOWN", err, st.Code(), ei.GetReason())
			}
		}
	}
}

func TestToStatusMergeConflictKeys(t *testing.T) {
	err := &graveler.MergeConflictError{Keys: []graveler.Key{graveler.Key("a/1"), graveler.Key("b\"2")}, Total: 7}
	st := ToStatus(withResource(fmt.Errorf("merge: %w", err), "branch", "repositories/r/branches/main"), "x")
	if st.Code() != codes.FailedPrecondition {
		t.Fatalf("code %v", st.Code())
	}
	md := errorInfo(t, st).GetMetadata()
	if md["conflictingKeys"] != `["a/1","b\"2"]` || md["conflictCount"] != "7" || md["branch"] != "repositories/r/branches/main" {
		t.Fatalf("metadata %v", md)
	}
}

func TestToStatusPassesStatusThrough(t *testing.T) {
	in := status.Error(codes.ResourceExhausted, "too big")
	if st := ToStatus(in, "r"); st.Code() != codes.ResourceExhausted || st.Message() != "too big" {
		t.Fatalf("got %v", st)
	}
	if ToStatus(nil, "r") != nil {
		t.Fatal("nil error gave a status")
	}
}

func TestPageSize(t *testing.T) {
	for _, c := range []struct {
		in   int32
		want int
		bad  bool
	}{{0, DefaultPageSize, false}, {5, 5, false}, {MaxPageSize + 1, MaxPageSize, false}, {-1, 0, true}} {
		got, err := pageSize(c.in)
		if (err != nil) != c.bad || got != c.want {
			t.Errorf("pageSize(%d) = %d, %v", c.in, got, err)
		}
		if c.bad && !errors.Is(err, graveler.ErrInvalidArgument) {
			t.Errorf("pageSize(%d) error %v is not invalid argument", c.in, err)
		}
	}
}

// codeAndReason returns the code and the ErrorInfo reason of err ("" when
// the status carries no ErrorInfo).
func codeAndReason(t *testing.T, err error) (codes.Code, string) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok {
		t.Fatalf("not a status: %v", err)
	}
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return st.Code(), ei.GetReason()
		}
	}
	return st.Code(), ""
}

// TestResetScopeOutOfRange: a scope the API does not define is a wrong
// value, not a missing one; an unset scope is missing.
func TestResetScopeOutOfRange(t *testing.T) {
	ctx := context.Background()
	c := largeRepo(t)
	for scope, want := range map[pb.ResetScope]string{99: "INVALID_FIELD", pb.ResetScope_RESET_SCOPE_UNSPECIFIED: "MISSING_FIELD"} {
		_, err := c.Reset(ctx, &pb.ResetRequest{Branch: largeBranch, Scope: scope})
		if code, reason := codeAndReason(t, err); code != codes.InvalidArgument || reason != want {
			t.Errorf("Reset scope %d: %v / %q, want InvalidArgument / %s (%v)", scope, code, reason, want, err)
		}
	}
}

// TestCommitMessageTooLarge: an oversized commit message is refused with a
// message naming the field and its limit, not the store's internals.
func TestCommitMessageTooLarge(t *testing.T) {
	ctx := context.Background()
	c := largeRepo(t)
	putLarge(t, c, 0, 1)
	msg := strings.Repeat("m", graveler.MaxCommitMessageLen+1)
	_, err := c.Commit(ctx, &pb.CommitRequest{Branch: largeBranch, Options: &pb.CommitOptions{Message: msg}})
	if code, reason := codeAndReason(t, err); code != codes.InvalidArgument || reason != "VALUE_TOO_LARGE" {
		t.Fatalf("commit of a %d-byte message: %v / %q, want InvalidArgument / VALUE_TOO_LARGE", len(msg), code, reason)
	}
	text := status.Convert(err).Message()
	if !strings.Contains(text, "commit message") || !strings.Contains(text, strconv.Itoa(graveler.MaxCommitMessageLen)) || strings.Contains(text, "kv") {
		t.Errorf("message %q should name the commit message and its limit, and nothing of the store", text)
	}
	ok := strings.Repeat("m", graveler.MaxCommitMessageLen)
	if _, err := c.Commit(ctx, &pb.CommitRequest{Branch: largeBranch, Options: &pb.CommitOptions{Message: ok}}); err != nil {
		t.Fatalf("commit of a message at the limit: %.200v", err)
	}
}

// TestNonUTF8KeyKeepsErrorInfo: keys are any bytes, and every error still
// carries the ErrorInfo whose reason programs switch on, with the key in
// its metadata base64-encoded under "keyBase64".
func TestNonUTF8KeyKeepsErrorInfo(t *testing.T) {
	ctx := context.Background()
	c := largeRepo(t)
	key := []byte("img/\xff.png") // e.g. a Latin-1 file name
	put := &pb.PutEntryRequest{Branch: largeBranch, IfAbsent: true,
		Entry: &pb.Entry{Key: key, Value: &pb.Value{Identity: []byte("id"), Data: []byte("d")}}}
	check := func(what string, err error, wantCode codes.Code, wantReason string) {
		t.Helper()
		if code, reason := codeAndReason(t, err); code != wantCode || reason != wantReason {
			t.Errorf("%s: %v / %q, want %v / %s", what, code, reason, wantCode, wantReason)
			return
		}
		md := errorInfo(t, status.Convert(err)).GetMetadata()
		if got, derr := base64.StdEncoding.DecodeString(md["keyBase64"]); derr != nil || !bytes.Equal(got, key) || md["key"] != "" {
			t.Errorf("%s: metadata %q, want the key under keyBase64 only", what, md)
		}
	}

	_, err := c.GetEntry(ctx, &pb.GetEntryRequest{Repository: "repositories/repo", Ref: "main", Key: key})
	check("GetEntry of a missing key", err, codes.NotFound, "ENTRY_NOT_FOUND")
	if _, err := c.PutEntry(ctx, put); err != nil {
		t.Fatal(err)
	}
	_, err = c.PutEntry(ctx, put)
	check("PutEntry if_absent of an existing key", err, codes.AlreadyExists, "ENTRY_ALREADY_EXISTS")
	put.IfAbsent = false
	put.Entry.Value.Data = bytes.Repeat([]byte("d"), graveler.MaxValueDataLen+1)
	_, err = c.PutEntry(ctx, put)
	check("PutEntry over the data limit", err, codes.InvalidArgument, "VALUE_TOO_LARGE")
}

// metaErr is an error whose ErrorInfo metadata it names itself.
type metaErr map[string]string

func (metaErr) Error() string                      { return "x: not found" }
func (metaErr) Unwrap() error                      { return graveler.ErrNotFound }
func (e metaErr) ErrorMetadata() map[string]string { return e }

// TestToStatusKeepsErrorInfo: a message or metadata that is not valid
// UTF-8 (which a proto string must be) does not cost the status its
// ErrorInfo.
func TestToStatusKeepsErrorInfo(t *testing.T) {
	for name, err := range map[string]error{
		"message":       fmt.Errorf("%w: key \xff\xfe", graveler.ErrEntryNotFound),
		"resource":      withResource(graveler.ErrEntryNotFound, "prefix", "a\xff"),
		"error's own":   metaErr{"path": "a\xff"},
		"metadata name": metaErr{"p\xff": "a"},
	} {
		st := ToStatus(err, "rid")
		ei := errorInfo(t, st)
		if ei.GetReason() == "" || ei.GetMetadata()["requestId"] != "rid" {
			t.Errorf("%s: ErrorInfo %v", name, ei)
		}
	}
	md := errorInfo(t, ToStatus(withResource(graveler.ErrEntryNotFound, "prefix", "a\xff"), "rid")).GetMetadata()
	if md["prefixBase64"] != base64.StdEncoding.EncodeToString([]byte("a\xff")) {
		t.Errorf("a non-UTF-8 prefix: metadata %q", md)
	}
	mc := &graveler.MergeConflictError{Keys: []graveler.Key{graveler.Key("a"), graveler.Key("\xff")}, Total: 2}
	md = errorInfo(t, ToStatus(fmt.Errorf("merge: %w", mc), "rid")).GetMetadata()
	if md["conflictingKeysBase64"] != `["YQ==","/w=="]` || md["conflictingKeys"] != "" {
		t.Errorf("non-UTF-8 conflicting keys: metadata %q", md)
	}
	var long []graveler.Key
	for range maxConflictKeys {
		long = append(long, graveler.Key(strings.Repeat("\x01", graveler.MaxKeyLen)))
	}
	md = errorInfo(t, ToStatus(&graveler.MergeConflictError{Keys: long, Total: 99}, "rid")).GetMetadata()
	if n := len(md["conflictingKeys"]); n == 0 || n > maxConflictJSON || md["conflictCount"] != "99" {
		t.Errorf("20 long conflicting keys: %d bytes of conflictingKeys, count %q", n, md["conflictCount"])
	}
}
