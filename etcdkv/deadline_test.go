package etcdkv_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"graveler/etcdkv"
	"graveler/etcdkv/etcdkvtest"
	"graveler/kv"
)

// dueCtx is a context whose deadline has come while its timer has not yet
// fired (Err still nil, Done still open): the moment in which etcd, given
// the same deadline, can already have answered DeadlineExceeded.
type dueCtx struct {
	context.Context
	deadline time.Time
}

func (c dueCtx) Deadline() (time.Time, bool) { return c.deadline, true }

// TestReadAtCallersDeadlineIsDeadlineExceeded: a read that etcd (or the
// gRPC client, which refuses to send a request whose deadline has passed)
// ends with DeadlineExceeded because the caller's own deadline has come
// fails with the caller's context.DeadlineExceeded, even before the
// caller's context reports it: the client ran out of its time, and
// kv.ErrUnavailable (STORE_UNAVAILABLE: etcd unreachable, retry) would
// send it after a fault that is not there.
func TestReadAtCallersDeadlineIsDeadlineExceeded(t *testing.T) {
	store := etcdkvtest.NewStore(t)
	if err := store.Set(context.Background(), []byte("p"), []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	ctx := dueCtx{Context: context.Background(), deadline: time.Now().Add(-time.Millisecond)}
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, kv.ErrUnavailable) {
			t.Errorf("%s at the caller's deadline: %v, want context.DeadlineExceeded and not kv.ErrUnavailable", what, err)
		}
	}
	_, _, err := store.Get(ctx, []byte("p"), []byte("k"))
	check("Get", err)
	for _, err := range store.Scan(ctx, []byte("p"), kv.ScanOptions{}) {
		if err != nil {
			check("Scan", err)
			break
		}
	}
}

// TestReadErrDeadlineExceededMapping: etcd's DeadlineExceeded is the
// caller's deadline when that deadline has passed or is a moment away
// (etcd may report it a little before the caller's context does), and
// etcd unavailable otherwise: a caller with time left, or without a
// deadline, did not run out of time.
func TestReadErrDeadlineExceededMapping(t *testing.T) {
	etcdErr := status.Error(codes.DeadlineExceeded, "context deadline exceeded")
	for _, c := range []struct {
		name     string
		ctx      context.Context
		deadline bool
	}{
		{"deadline passed, context not yet ended", dueCtx{context.Background(), time.Now().Add(-time.Millisecond)}, true},
		{"deadline a moment away", dueCtx{context.Background(), time.Now().Add(time.Millisecond)}, true},
		{"deadline a minute away", dueCtx{context.Background(), time.Now().Add(time.Minute)}, false},
		{"no deadline", context.Background(), false},
	} {
		for _, err := range []error{etcdErr, context.DeadlineExceeded} {
			got := etcdkv.ReadErrForTest(c.ctx, err)
			if c.deadline && (!errors.Is(got, context.DeadlineExceeded) || errors.Is(got, kv.ErrUnavailable)) {
				t.Errorf("%s, etcd error %v: %v, want context.DeadlineExceeded", c.name, err, got)
			}
			if !c.deadline && !errors.Is(got, kv.ErrUnavailable) {
				t.Errorf("%s, etcd error %v: %v, want kv.ErrUnavailable", c.name, err, got)
			}
		}
	}
}
