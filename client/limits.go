package client

import (
	"fmt"
	"strconv"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "graveler/api/graveler/v1"
)

// The server's size limits. The client checks a request against them
// before sending it, so that a request the server would refuse fails at
// once with a message naming the limit, instead of after the transfer (or,
// for the message size, with gRPC's bare RESOURCE_EXHAUSTED).
const (
	MaxKeyLen          = 1024      // bytes of an entry key
	MaxIdentityLen     = 256       // bytes of a value's identity
	MaxValueDataLen    = 512 << 10 // bytes of a value's data
	MaxRepositoryIDLen = 63
	MaxBranchIDLen     = 256
	MaxTagIDLen        = 256
	// DefaultMaxRequestSize is gravelerd's default bound on one request
	// message (server.GRPCOptions.MaxRecvMsgSize); WithMaxRequestSize
	// changes what the client assumes.
	DefaultMaxRequestSize = 4 << 20
)

// tooLarge is a request the client refuses to send: an *Error with the code
// and ErrorInfo reason the server would have answered, and limit, size and
// checkedBy=client in its metadata.
func tooLarge(c codes.Code, reason string, size, limit int, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...) + fmt.Sprintf(" is %d bytes; the limit is %s (checked by the client before sending)", size, fmtBytes(limit))
	meta := map[string]string{"size": strconv.Itoa(size), "limit": strconv.Itoa(limit), "checkedBy": "client"}
	st := status.New(c, msg)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: "graveler.v1", Metadata: meta}); err == nil {
		st = d
	}
	return fromStatus(st.Err())
}

func fmtBytes(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d bytes (%d MiB)", n, n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d bytes (%d KiB)", n, n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

func checkEntry(e *pb.Entry, where string) error {
	if n := len(e.GetKey()); n > MaxKeyLen {
		return tooLarge(codes.InvalidArgument, "INVALID_KEY", n, MaxKeyLen, "%skey %.40q...", where, e.GetKey())
	}
	if n := len(e.GetValue().GetIdentity()); n > MaxIdentityLen {
		return tooLarge(codes.InvalidArgument, "VALUE_TOO_LARGE", n, MaxIdentityLen, "%sidentity of key %q", where, e.GetKey())
	}
	if n := len(e.GetValue().GetData()); n > MaxValueDataLen {
		return tooLarge(codes.InvalidArgument, "VALUE_TOO_LARGE", n, MaxValueDataLen, "%sdata of key %q", where, e.GetKey())
	}
	return nil
}

func checkID(reason, what, id string, limit int) error {
	if len(id) > limit {
		return tooLarge(codes.InvalidArgument, reason, len(id), limit, "%s %.40q...", what, id)
	}
	return nil
}

// checkRequest applies the limits to the requests that carry sizeable
// input; maxSize bounds the whole message (0: unchecked).
func checkRequest(req any, maxSize int) error {
	switch r := req.(type) {
	case *pb.PutEntryRequest:
		if err := checkEntry(r.GetEntry(), ""); err != nil {
			return err
		}
	case *pb.BatchPutEntriesRequest:
		for i, e := range r.GetEntries() {
			if err := checkEntry(e, fmt.Sprintf("entry %d: ", i)); err != nil {
				return err
			}
		}
	case *pb.DeleteEntryRequest:
		if err := checkEntry(&pb.Entry{Key: r.GetKey()}, ""); err != nil {
			return err
		}
	case *pb.DeletePrefixRequest:
		if n := len(r.GetPrefix()); n > MaxKeyLen {
			return tooLarge(codes.InvalidArgument, "INVALID_KEY", n, MaxKeyLen, "prefix %.40q...", r.GetPrefix())
		}
	case *pb.CreateRepositoryRequest:
		if err := checkID("INVALID_REPOSITORY_ID", "repository id", r.GetRepositoryId(), MaxRepositoryIDLen); err != nil {
			return err
		}
	case *pb.CreateBranchRequest:
		if err := checkID("INVALID_BRANCH_ID", "branch id", r.GetBranchId(), MaxBranchIDLen); err != nil {
			return err
		}
	case *pb.CreateTagRequest:
		if err := checkID("INVALID_TAG_ID", "tag id", r.GetTagId(), MaxTagIDLen); err != nil {
			return err
		}
	}
	if m, ok := req.(proto.Message); ok && maxSize > 0 {
		if n := proto.Size(m); n > maxSize {
			return tooLarge(codes.ResourceExhausted, "REQUEST_TOO_LARGE", n, maxSize, "the %s request", proto.MessageName(m).Name())
		}
	}
	return nil
}
