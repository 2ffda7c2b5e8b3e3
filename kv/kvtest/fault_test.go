package kvtest_test

import (
	"context"
	"errors"
	"testing"

	"graveler/kv"
	"graveler/kv/kvtest"
)

func TestFaultStoreModes(t *testing.T) {
	ctx := context.Background()
	f := kvtest.NewFaultStore(kv.NewMemoryStore())
	part := []byte("p")

	f.FailAt(1, kvtest.FaultError)
	if err := f.Set(ctx, part, []byte("a"), []byte("1")); !errors.Is(err, kv.ErrUnavailable) || !errors.Is(err, kvtest.ErrInjected) {
		t.Fatalf("error mode: %v", err)
	}
	if _, _, err := f.Inner().Get(ctx, part, []byte("a")); !errors.Is(err, kv.ErrNotFound) {
		t.Fatalf("error mode applied the write: %v", err)
	}

	f.Reset()
	f.FailAt(1, kvtest.FaultAmbiguousApplied)
	if err := f.Set(ctx, part, []byte("a"), []byte("1")); !errors.Is(err, kv.ErrAmbiguous) {
		t.Fatalf("ambiguous-applied: %v", err)
	}
	if v, _, err := f.Inner().Get(ctx, part, []byte("a")); err != nil || string(v) != "1" {
		t.Fatalf("ambiguous-applied did not apply: %q %v", v, err)
	}

	f.Reset()
	f.FailAt(1, kvtest.FaultAmbiguousNotApplied)
	if err := f.Set(ctx, part, []byte("b"), []byte("1")); !errors.Is(err, kv.ErrAmbiguous) {
		t.Fatalf("ambiguous-not-applied: %v", err)
	}
	if _, _, err := f.Inner().Get(ctx, part, []byte("b")); !errors.Is(err, kv.ErrNotFound) {
		t.Fatalf("ambiguous-not-applied applied: %v", err)
	}

	f.Reset()
	f.FailAt(2, kvtest.FaultCrash)
	if err := f.Set(ctx, part, []byte("c"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	if err := f.Set(ctx, part, []byte("d"), []byte("1")); !errors.Is(err, kvtest.ErrCrashed) {
		t.Fatalf("crash: %v", err)
	}
	if _, _, err := f.Get(ctx, part, []byte("c")); !errors.Is(err, kvtest.ErrCrashed) || !f.Crashed() {
		t.Fatalf("after crash: %v", err)
	}
	if f.Ops() != 3 || f.Injected() != 1 {
		t.Fatalf("ops %d injected %d", f.Ops(), f.Injected())
	}

	f.Reset()
	f.FailRandomly(7, 0.5, kvtest.FaultError)
	var failed int
	for i := 0; i < 200; i++ {
		if f.Set(ctx, part, []byte("r"), []byte("v")) != nil {
			failed++
		}
	}
	if failed < 50 || failed > 150 || int64(failed) != f.Injected() {
		t.Fatalf("random faults: %d failed, %d injected", failed, f.Injected())
	}
}
