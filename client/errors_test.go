package client

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestFromStatus(t *testing.T) {
	st, err := status.New(codes.Aborted, "branch head moved").WithDetails(&errdetails.ErrorInfo{
		Reason: "BRANCH_HEAD_MOVED", Domain: "graveler.v1", Metadata: map[string]string{"branch": "repositories/r/branches/b"},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Errorf("wrapped: %w", fromStatus(st.Err()))
	if !errors.Is(got, ErrAborted) || errors.Is(got, ErrNotFound) {
		t.Fatalf("sentinel matching: %v", got)
	}
	if Reason(got) != "BRANCH_HEAD_MOVED" {
		t.Fatalf("reason %q", Reason(got))
	}
	e, ok := errors.AsType[*Error](got)
	if !ok || e.Metadata["branch"] != "repositories/r/branches/b" || e.Code != codes.Aborted {
		t.Fatalf("error %+v", e)
	}
	if s, ok := status.FromError(got); !ok || s.Code() != codes.Aborted {
		t.Fatalf("status.FromError: %v %v", s, ok)
	}
	for code, want := range map[codes.Code]error{
		codes.NotFound: ErrNotFound, codes.AlreadyExists: ErrAlreadyExists, codes.InvalidArgument: ErrInvalidArgument,
		codes.FailedPrecondition: ErrFailedPrecondition, codes.Unavailable: ErrUnavailable,
		codes.Unauthenticated: ErrUnauthenticated, codes.DeadlineExceeded: ErrDeadlineExceeded, codes.Internal: ErrInternal,
	} {
		if err := fromStatus(status.Error(code, "x")); !errors.Is(err, want) || Reason(err) != "" {
			t.Errorf("%v: %v", code, err)
		}
	}
	if fromStatus(io.EOF) != io.EOF || fromStatus(nil) != nil {
		t.Fatal("io.EOF and nil must pass through")
	}
}
