package server_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	pb "graveler/api/graveler/v1"
	"graveler/graveler"
)

// recvAll reads a server stream to its end; nil when it ended cleanly.
func recvAll[T any](s interface{ Recv() (T, error) }, err error) error {
	if err != nil {
		return err
	}
	for {
		if _, err := s.Recv(); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
	}
}

// TestListEntriesPrefixOverKeyLimit: no key is longer than
// graveler.MaxKeyLen, so a listing prefix or delimiter longer than that is
// the client's mistake, refused as INVALID_ARGUMENT / INVALID_KEY as
// DeletePrefix refuses such a prefix, on a branch (staged entries read
// from etcd) and on a tag alike. A megabytes-long prefix used to reach
// etcd's range request and come back RESOURCE_EXHAUSTED with etcd's words.
func TestListEntriesPrefixOverKeyLimit(t *testing.T) {
	e := startDaemon(t)
	ctx := context.Background()
	long := bytes.Repeat([]byte("p"), graveler.MaxKeyLen+1)
	huge := make([]byte, 3<<20)
	for _, ref := range []string{"main", "v1"} {
		for _, c := range []struct {
			name              string
			prefix, delimiter []byte
		}{
			{"1025-byte prefix", long, nil},
			{"3 MiB prefix", huge, nil},
			{"3 MiB delimiter", nil, huge},
		} {
			_, err := e.c.ListEntries(ctx, &pb.ListEntriesRequest{Repository: "repositories/repo", Ref: ref, Prefix: c.prefix, Delimiter: c.delimiter})
			if code, reason, _ := statusInfo(err); code != codes.InvalidArgument || reason != "INVALID_KEY" {
				t.Errorf("ListEntries at %s with a %s: %v", ref, c.name, err)
			}
			err = recvAll(e.c.StreamEntries(ctx, &pb.StreamEntriesRequest{Repository: "repositories/repo", Ref: ref, Prefix: c.prefix, Delimiter: c.delimiter}))
			if code, reason, _ := statusInfo(err); code != codes.InvalidArgument || reason != "INVALID_KEY" {
				t.Errorf("StreamEntries at %s with a %s: %v", ref, c.name, err)
			}
		}
		// A prefix as long as a key can be is fine.
		full := bytes.Repeat([]byte("a"), graveler.MaxKeyLen)
		if _, err := e.c.ListEntries(ctx, &pb.ListEntriesRequest{Repository: "repositories/repo", Ref: ref, Prefix: full, Delimiter: full}); err != nil {
			t.Errorf("ListEntries at %s with a %d-byte prefix and delimiter: %v", ref, graveler.MaxKeyLen, err)
		}
	}
}

// wireCodec sends and receives a message's encoding as it is (a *[]byte),
// so that a test can send what no generated client would.
type wireCodec struct{}

func (wireCodec) Marshal(v any) ([]byte, error) { return *(v.(*[]byte)), nil }
func (wireCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}
func (wireCodec) Name() string { return "proto" }

var _ encoding.Codec = wireCodec{}

// wireString encodes string field num holding s, valid UTF-8 or not.
func wireString(num protowire.Number, s string) []byte {
	return protowire.AppendString(protowire.AppendTag(nil, num, protowire.BytesType), s)
}

// TestUndecodableRequestInvalidArgument: a request the server cannot
// decode (a string field that is not UTF-8, bytes that are no protobuf
// message) is the client's fault: INVALID_ARGUMENT / MALFORMED_REQUEST
// with the request id in its ErrorInfo, for unary, server-streaming and
// client-streaming methods and for the health service alike. gRPC's own
// answer was INTERNAL with no ErrorInfo, which says the server is broken.
func TestUndecodableRequestInvalidArgument(t *testing.T) {
	e := startDaemon(t)
	ctx := context.Background()
	const svc = "/graveler.v1.GravelerService/"
	check := func(what string, err error) {
		t.Helper()
		code, reason, _ := statusInfo(err)
		meta := statusMeta(err)
		if code != codes.InvalidArgument || reason != "MALFORMED_REQUEST" || meta["requestId"] == "" {
			t.Errorf("%s: %v (reason %q, metadata %v)", what, err, reason, meta)
		}
	}
	for _, c := range []struct {
		method string
		body   []byte
	}{
		{svc + "GetRepository", wireString(1, "repositories/\xff\xfe")},
		{svc + "GetEntry", append(wireString(1, "repositories/repo"), wireString(2, "ma\xffin")...)},
		{svc + "PutEntry", wireString(1, "repositories/repo/branches/\xc3")},
		{svc + "GetRepository", []byte{0xff}},
		{"/grpc.health.v1.Health/Check", wireString(1, "\xff")},
	} {
		out := []byte(nil)
		err := e.conn.Invoke(ctx, c.method, &c.body, &out, grpc.ForceCodec(wireCodec{}))
		check(fmt.Sprintf("%s with %q", c.method, c.body), err)
	}

	// Server streaming: the request is the stream's one message.
	desc := &grpc.StreamDesc{ServerStreams: true}
	s, err := e.conn.NewStream(ctx, desc, svc+"StreamEntries", grpc.ForceCodec(wireCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	body := append(wireString(1, "repositories/repo"), wireString(2, "\xff")...)
	if err := s.SendMsg(&body); err != nil {
		t.Fatal(err)
	}
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var out []byte
	check("StreamEntries", s.RecvMsg(&out))

	// Client streaming: a bad first message, and a bad one after a good
	// one (into a bare repository, which a restore reads on into).
	if _, err := e.c.CreateRepository(ctx, &pb.CreateRepositoryRequest{RepositoryId: "bare", Bare: true}); err != nil {
		t.Fatal(err)
	}
	for _, msgs := range [][][]byte{
		{wireString(1, "repositories/\xff")},
		{wireString(1, "repositories/bare"), wireString(1, "repositories/\xff")},
	} {
		s, err := e.conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true}, svc+"RestoreRefs", grpc.ForceCodec(wireCodec{}))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if err := s.SendMsg(&m); err != nil {
				break // the server ended the call; RecvMsg has its status
			}
		}
		_ = s.CloseSend()
		check(fmt.Sprintf("RestoreRefs with %d messages", len(msgs)), s.RecvMsg(&out))
	}
}

// TestBatchPutBadEntryNamesIndex: a BatchPutEntries refused for one
// entry's key or value says which entry, by its index and key, in the
// message and in the ErrorInfo metadata (entryIndex, key cut to the key
// limit with keyLength as usual), so a client can find it among a
// thousand.
func TestBatchPutBadEntryNamesIndex(t *testing.T) {
	e := startDaemon(t)
	ctx := context.Background()
	long := strings.Repeat("x", graveler.MaxKeyLen+1)
	for _, c := range []struct {
		name   string
		mutate func(*pb.Entry)
		reason string
		key    string // the key the metadata names ("": none)
	}{
		{"1025-byte key", func(en *pb.Entry) { en.Key = []byte(long) }, "INVALID_KEY", long[:graveler.MaxKeyLen]},
		{"empty key", func(en *pb.Entry) { en.Key = nil }, "INVALID_KEY", ""},
		{"empty identity", func(en *pb.Entry) { en.Value.Identity = nil }, "INVALID_VALUE", "k500"},
		{"no value", func(en *pb.Entry) { en.Value = nil }, "MISSING_FIELD", "k500"},
	} {
		es := make([]*pb.Entry, 600)
		for i := range es {
			es[i] = &pb.Entry{Key: []byte(fmt.Sprint("k", i)), Value: &pb.Value{Identity: []byte("i")}}
		}
		c.mutate(es[500])
		_, err := e.c.BatchPutEntries(ctx, &pb.BatchPutEntriesRequest{Branch: "repositories/repo/branches/dev", Entries: es})
		code, reason, _ := statusInfo(err)
		meta := statusMeta(err)
		msg := status.Convert(err).Message()
		if code != codes.InvalidArgument || reason != c.reason || !strings.Contains(msg, "entry 500") || meta["entryIndex"] != "500" || meta["key"] != c.key {
			t.Errorf("batch with a bad entry 500 (%s): %v (reason %s, metadata %v)", c.name, err, reason, meta)
		}
		if c.key == long[:graveler.MaxKeyLen] && (meta["keyLength"] != "1025" || len(msg) > 400) {
			t.Errorf("batch with a bad entry 500 (%s): the key is not cut: %d-byte message, metadata keyLength %q", c.name, len(msg), meta["keyLength"])
		}
	}
}

// TestOutOfRangeFieldReasons: a field holding a value the API does not
// define gets the reason documented for it, whichever way it is out of
// range: a merge strategy out of the enum is INVALID_FIELD (as a Reset
// scope is), and a negative parent number is INVALID_PARENT_NUMBER (as
// one past the commit's parents is), for Revert and CherryPick alike.
func TestOutOfRangeFieldReasons(t *testing.T) {
	e := startDaemon(t)
	ctx := context.Background()
	const dev = "repositories/repo/branches/dev"
	_, err := e.c.Merge(ctx, &pb.MergeRequest{Destination: dev, SourceRef: "main", Strategy: 7})
	if code, reason, _ := statusInfo(err); code != codes.InvalidArgument || reason != "INVALID_FIELD" {
		t.Errorf("Merge strategy 7: %v (reason %q)", err, reason)
	}
	for _, n := range []int32{-1, 5} {
		_, err = e.c.Revert(ctx, &pb.RevertRequest{Branch: dev, Ref: "main", ParentNumber: n})
		if code, reason, _ := statusInfo(err); code != codes.InvalidArgument || reason != "INVALID_PARENT_NUMBER" {
			t.Errorf("Revert parent_number %d: %v (reason %q)", n, err, reason)
		}
		_, err = e.c.CherryPick(ctx, &pb.CherryPickRequest{Branch: dev, Ref: "main", ParentNumber: n})
		if code, reason, _ := statusInfo(err); code != codes.InvalidArgument || reason != "INVALID_PARENT_NUMBER" {
			t.Errorf("CherryPick parent_number %d: %v (reason %q)", n, err, reason)
		}
	}
}

// TestPickNoChangesNamesBranch: a CherryPick or Revert that would change
// nothing names the branch and the commit in its NO_CHANGES message, as
// Commit and Merge name the branch in theirs.
func TestPickNoChangesNamesBranch(t *testing.T) {
	e := startDaemon(t)
	ctx := context.Background()
	const dev = "repositories/repo/branches/dev"
	head, err := e.c.GetBranch(ctx, &pb.GetBranchRequest{Name: "repositories/repo/branches/main"})
	if err != nil {
		t.Fatal(err)
	}
	commit := head.GetBranch().GetCommitId()
	// dev holds main's commit already: picking it again changes nothing.
	_, err = e.c.CherryPick(ctx, &pb.CherryPickRequest{Branch: dev, Ref: "main"})
	checkNoChanges(t, "CherryPick", err, commit)
	// Reverting it twice: the second finds nothing left to undo.
	if _, err := e.c.Revert(ctx, &pb.RevertRequest{Branch: dev, Ref: "main"}); err != nil {
		t.Fatal(err)
	}
	_, err = e.c.Revert(ctx, &pb.RevertRequest{Branch: dev, Ref: "main"})
	checkNoChanges(t, "Revert", err, commit)
}

func checkNoChanges(t *testing.T, what string, err error, commit string) {
	t.Helper()
	msg := status.Convert(err).Message()
	if _, reason, _ := statusInfo(err); reason != "NO_CHANGES" || !strings.Contains(msg, "branch dev") ||
		!strings.Contains(msg, "repository repo") || !strings.Contains(msg, commit) {
		t.Errorf("%s with no changes: %v", what, err)
	}
}
