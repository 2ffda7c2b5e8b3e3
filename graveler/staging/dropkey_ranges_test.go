package staging_test

import (
	"testing"

	"graveler/graveler"
	"graveler/graveler/staging"
	"graveler/kv"
)

// TestDropKeyKeepsEmptyResetRange: DropKey writes the ranges record again
// with every revision as read; a reset range of the empty prefix keeps its
// own (it must not take the rewrite's, which would hide what was staged
// after it).
func TestDropKeyKeepsEmptyResetRange(t *testing.T) {
	ctx := t.Context()
	s := kv.NewMemoryStore()
	m := staging.New(s, staging.Config{})
	st := graveler.StagingToken("tok1")
	v := &graveler.Value{Identity: []byte("id"), Data: []byte("d")}
	if err := m.ResetPrefix(ctx, st, graveler.Key("")); err != nil {
		t.Fatal(err)
	}
	if err := m.Set(ctx, st, graveler.Key("x"), v); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Get(ctx, st, graveler.Key("x")); err != nil {
		t.Fatalf("before: %v", err)
	}
	if err := m.DropKey(ctx, st, graveler.Key("y")); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Get(ctx, st, graveler.Key("x")); err != nil {
		t.Fatalf("x, staged after the reset range, lost after DropKey(y): %v", err)
	}
}
