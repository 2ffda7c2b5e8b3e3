package cli_test

import (
	"testing"

	"google.golang.org/grpc/codes"

	"graveler/client"
	"graveler/cmd/gravelerctl/cli"
)

// TestExitCodeOfEveryStatusCode pins the exit code of each gRPC status
// code, the table README.md, docs/operations.md and the package doc give.
func TestExitCodeOfEveryStatusCode(t *testing.T) {
	want := map[codes.Code]int{
		codes.Canceled:           cli.ExitError,
		codes.Unknown:            cli.ExitError,
		codes.InvalidArgument:    cli.ExitInvalidArgument,
		codes.DeadlineExceeded:   cli.ExitUnavailable,
		codes.NotFound:           cli.ExitNotFound,
		codes.AlreadyExists:      cli.ExitAlreadyExists,
		codes.PermissionDenied:   cli.ExitUnauthenticated,
		codes.ResourceExhausted:  cli.ExitUnavailable,
		codes.FailedPrecondition: cli.ExitFailedPrecondition,
		codes.Aborted:            cli.ExitAborted,
		codes.OutOfRange:         cli.ExitInvalidArgument,
		codes.Unimplemented:      cli.ExitError,
		codes.Internal:           cli.ExitError,
		codes.Unavailable:        cli.ExitUnavailable,
		codes.DataLoss:           cli.ExitError,
		codes.Unauthenticated:    cli.ExitUnauthenticated,
	}
	for code := codes.Canceled; code <= codes.Unauthenticated; code++ {
		if got := cli.ExitCode(&client.Error{Code: code, Message: "m"}); got != want[code] {
			t.Errorf("%v: exit %d, want %d", code, got, want[code])
		}
	}
	// A message over a size limit is invalid input, not "retry later".
	tooLarge := &client.Error{Code: codes.ResourceExhausted, Message: "grpc: received message larger than max (5000000 vs. 4194304)"}
	if got := cli.ExitCode(tooLarge); got != cli.ExitInvalidArgument {
		t.Errorf("message too large: exit %d, want %d", got, cli.ExitInvalidArgument)
	}
}
