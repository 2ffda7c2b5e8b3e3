package client

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Sentinels, one per class of status code. Match them with errors.Is.
var (
	ErrNotFound           = errors.New("client: not found")
	ErrAlreadyExists      = errors.New("client: already exists")
	ErrInvalidArgument    = errors.New("client: invalid argument")
	ErrAborted            = errors.New("client: aborted (concurrent update; re-read and retry)")
	ErrFailedPrecondition = errors.New("client: failed precondition")
	ErrUnavailable        = errors.New("client: unavailable")
	ErrUnauthenticated    = errors.New("client: unauthenticated")
	ErrPermissionDenied   = errors.New("client: permission denied")
	ErrDeadlineExceeded   = errors.New("client: deadline exceeded")
	ErrCanceled           = errors.New("client: canceled")
	ErrResourceExhausted  = errors.New("client: resource exhausted")
	ErrInternal           = errors.New("client: internal server error")
	// ErrMessageTooLarge is the part of ErrResourceExhausted that no retry
	// can cure: a request (or response) over a gRPC message size limit,
	// whether gRPC or the client's own check (reason REQUEST_TOO_LARGE)
	// found it. Split the request, or raise the limit.
	ErrMessageTooLarge = errors.New("client: message too large")
)

var sentinels = map[codes.Code]error{
	codes.NotFound:           ErrNotFound,
	codes.AlreadyExists:      ErrAlreadyExists,
	codes.InvalidArgument:    ErrInvalidArgument,
	codes.OutOfRange:         ErrInvalidArgument,
	codes.Aborted:            ErrAborted,
	codes.FailedPrecondition: ErrFailedPrecondition,
	codes.Unavailable:        ErrUnavailable,
	codes.Unauthenticated:    ErrUnauthenticated,
	codes.PermissionDenied:   ErrPermissionDenied,
	codes.DeadlineExceeded:   ErrDeadlineExceeded,
	codes.Canceled:           ErrCanceled,
	codes.ResourceExhausted:  ErrResourceExhausted,
	codes.Internal:           ErrInternal,
	codes.Unknown:            ErrInternal,
	codes.DataLoss:           ErrInternal,
	codes.Unimplemented:      ErrInternal,
}

// Error is a failed call: the status code and message, and the reason and
// metadata of the server's ErrorInfo (empty when it sent none).
type Error struct {
	Code     codes.Code
	Message  string
	Reason   string
	Domain   string
	Metadata map[string]string
	status   *status.Status
}

func (e *Error) Error() string {
	if e.Reason != "" {
		return fmt.Sprintf("%s: %s (%s)", e.Code, e.Message, e.Reason)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

// Is matches the sentinel of e's code class, and ErrMessageTooLarge.
func (e *Error) Is(target error) bool {
	if target == ErrMessageTooLarge {
		// gRPC's own size errors carry no ErrorInfo, only this wording.
		return e.Code == codes.ResourceExhausted &&
			(e.Reason == "REQUEST_TOO_LARGE" || e.Reason == "" && strings.Contains(e.Message, "larger than max"))
	}
	s, ok := sentinels[e.Code]
	return ok && s == target
}

// GRPCStatus lets status.FromError see through an *Error.
func (e *Error) GRPCStatus() *status.Status { return e.status }

// fromStatus turns a gRPC status error into an *Error; other errors (and
// io.EOF, which ends a stream) pass through.
func fromStatus(err error) error {
	if err == nil || errors.Is(err, io.EOF) {
		return err
	}
	if _, ok := errors.AsType[*Error](err); ok {
		return err
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	e := &Error{Code: st.Code(), Message: st.Message(), status: st}
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			e.Reason, e.Domain, e.Metadata = ei.GetReason(), ei.GetDomain(), ei.GetMetadata()
			break
		}
	}
	return e
}

// Reason returns the ErrorInfo reason of err (e.g. "BRANCH_NOT_FOUND"), or "".
func Reason(err error) string {
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Reason
	}
	return ""
}
