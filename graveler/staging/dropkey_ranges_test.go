package staging_test

import (
	"errors"
	"strings"
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

// TestGetNotStagedNamesKey: a key never staged, and one a reset range
// hides, are ErrEntryNotFound naming the key and the token, from Get as
// from the fenced path's ParseEntry (which leaves the naming out: its
// caller goes on to the next token).
func TestGetNotStagedNamesKey(t *testing.T) {
	ctx := t.Context()
	m := staging.New(kv.NewMemoryStore(), staging.Config{})
	st := graveler.StagingToken("tok1")
	if err := m.Set(ctx, st, graveler.Key("a/x"), &graveler.Value{Identity: []byte("id"), Data: []byte("d")}); err != nil {
		t.Fatal(err)
	}
	if err := m.ResetPrefix(ctx, st, graveler.Key("a/")); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"never", "a/x"} {
		_, err := m.Get(ctx, st, graveler.Key(key))
		if !errors.Is(err, graveler.ErrEntryNotFound) || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), string(st)) {
			t.Errorf("Get(%q): %v, want ErrEntryNotFound naming the key and token", key, err)
		}
		ref, err := m.EntryRef(st, graveler.Key(key))
		if err != nil {
			t.Fatal(err)
		}
		got, err := m.ReadAt(ctx, []kv.KeyRef{ref})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.ParseEntry(st, graveler.Key(key), got[0]); !errors.Is(err, graveler.ErrEntryNotFound) {
			t.Errorf("ParseEntry(%q): %v, want ErrEntryNotFound", key, err)
		}
	}
}
