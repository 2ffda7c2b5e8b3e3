package etcdkv_test

import (
	"bytes"
	"errors"
	"testing"

	"graveler/etcdkv"
	"graveler/etcdkv/etcdkvtest"
	"graveler/graveler"
	"graveler/graveler/staging"
	"graveler/keys"
	"graveler/kv"
)

// TestDropKeySettlementTellsDropsApart: DropKey writes the token's ranges
// record again as it read it, with a key's reset record beside it.
// SetIfWith settles an ambiguous attempt by whether the record's first
// change after the predicate holds the attempt's value, so two DropKeys
// that read the same record must not send the same bytes: each write
// carries its own write id. Here DropKey(b) wins over an attempt of
// DropKey(a) (stood in for by an earlier write of the record) whose answer
// was lost; settling that attempt must find it not applied, and a stays
// staged for the caller to drop again.
func TestDropKeySettlementTellsDropsApart(t *testing.T) {
	srv := etcdkvtest.NewServer(t)
	s := etcdkvtest.NewStoreOn(t, srv, etcdkv.Config{})
	ctx := t.Context()
	m := staging.New(s, staging.Config{})
	st := graveler.StagingToken("tok1")
	part := keys.StagingPartition(string(st))
	val := &graveler.Value{Identity: []byte("id"), Data: []byte("d")}
	for _, k := range []string{"a", "b", "c"} {
		if err := m.Set(ctx, st, graveler.Key(k), val); err != nil {
			t.Fatal(err)
		}
	}
	// An unrelated prefix delete: the token has a ranges record.
	if err := m.DeletePrefix(ctx, st, graveler.Key("z/")); err != nil {
		t.Fatal(err)
	}
	// One drop resolves the record's revisions; every later DropKey that
	// reads it writes it back byte for byte.
	if err := m.DropKey(ctx, st, graveler.Key("c")); err != nil {
		t.Fatal(err)
	}
	rec, pred, err := s.Get(ctx, part, keys.StagingRanges())
	if err != nil {
		t.Fatal(err)
	}
	resetRec, _, err := s.Get(ctx, part, keys.Entry([]byte("c")))
	if err != nil {
		t.Fatal(err)
	}
	sentAfter := s.SentAfterForTest()
	// DropKey(a) read (rec, pred) and sent its SetIfWith; the answer is
	// lost. Meanwhile DropKey(b), which read the same record, applies.
	if err := m.DropKey(ctx, st, graveler.Key("b")); err != nil {
		t.Fatal(err)
	}
	rec2, _, _ := s.Get(ctx, part, keys.StagingRanges())
	if bytes.Equal(rec, rec2) {
		t.Fatal("two writes of the same ranges record are the same bytes")
	}
	err = s.SettleSetIfWithForTest(ctx, part, keys.StagingRanges(), rec, pred,
		[]kv.KeyRef{{Partition: part, Key: keys.StagingSealed()}},
		[]kv.Write{{Partition: part, Key: keys.Entry([]byte("a")), Value: resetRec}}, sentAfter)
	if !errors.Is(err, kv.ErrPredicateFailed) {
		t.Fatalf("an attempt another drop's write overtook settled as %v, want ErrPredicateFailed", err)
	}
	if _, err := m.Get(ctx, st, graveler.Key("a")); err != nil {
		t.Fatalf("a after its drop was found not applied: %v, want still staged", err)
	}
}
