package etcdkv_test

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	"graveler/graveler"
	"graveler/graveler/staging"
	"graveler/graveler/staging/stagingpb"
	"graveler/keys"
	"graveler/kv"
)

// TestAbandonedStagedWriteCannotLandAfterReset: a staged write's first
// attempt is held by a stopped member (built here and sent last); its
// re-send is acknowledged, then a reset of the key is acknowledged, then
// the held attempt reaches the leader. A reset that deleted the entry
// would leave the key without a revision, and the attempt's guard
// (nothing written since its bound) would pass: the discarded value would
// come back. The reset writes a reset record instead, so the attempt
// finds the key written after its bound and applies nothing.
func TestAbandonedStagedWriteCannotLandAfterReset(t *testing.T) {
	f := newLateFixture(t)
	ctx := t.Context()
	const tok = graveler.StagingToken("late-reset.0123456789abcdef0123456789abcdef")
	f.part = keys.StagingPartition(string(tok))
	mine := staging.New(f.s, staging.Config{})
	other := staging.New(f.other, staging.Config{})
	v := func(s string) *graveler.Value { return &graveler.Value{Identity: []byte(s), Data: []byte(s)} }
	entry := func(s string) []byte {
		b, err := proto.Marshal(&stagingpb.Entry{FormatVersion: 1, Identity: []byte(s), Data: []byte(s)})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if err := other.Set(ctx, tok, graveler.Key("k"), v("v0")); err != nil {
		t.Fatal(err)
	}
	sealed := []kv.KeyRef{{Partition: f.part, Key: keys.StagingSealed()}}
	late, err := f.s.SetAndReadUnlessTxnForTest(ctx, sealed, []kv.Write{{Partition: f.part, Key: keys.Entry([]byte("k")), Value: entry("v1")}}, nil, f.s.SentAfterForTest())
	if err != nil {
		t.Fatal(err)
	}
	if err := mine.Set(ctx, tok, graveler.Key("k"), v("v1")); err != nil { // the re-send
		t.Fatal(err)
	}
	if err := other.DropKey(ctx, tok, graveler.Key("k")); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Get(ctx, tok, graveler.Key("k")); !errors.Is(err, graveler.ErrEntryNotFound) {
		t.Fatalf("after the reset: %v, want not found", err)
	}
	if commit(t, late) {
		t.Fatal("the abandoned attempt applied after an acknowledged reset of its key")
	}
	if got, err := other.Get(ctx, tok, graveler.Key("k")); !errors.Is(err, graveler.ErrEntryNotFound) {
		t.Fatalf("after the held attempt: %+v, %v; want not found", got, err)
	}
}
