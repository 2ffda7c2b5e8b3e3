package kvtest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"graveler/kv"
	"graveler/kv/kvtest"
)

// A SetIf held between its caller's Get and its own write loses to the
// write that runs while it is held: the shape of every interleaving test.
func TestPauseStoreHoldsBetweenReadAndWrite(t *testing.T) {
	ctx := context.Background()
	s := kvtest.NewPauseStore(kv.NewMemoryStore())
	defer s.Close()
	part, key := []byte("p"), []byte("k")
	if err := s.Set(ctx, part, key, []byte("v1")); err != nil {
		t.Fatal(err)
	}
	pt := s.Pause(kvtest.Before, func(op kvtest.Op) bool { return op.Is("setif", part, key) })
	done := make(chan error, 1)
	go func() {
		_, pred, err := s.Get(ctx, part, key)
		if err != nil {
			done <- err
			return
		}
		done <- s.SetIf(ctx, part, key, []byte("mine"), pred)
	}()
	pt.Wait(t, 5*time.Second)
	if err := s.Set(ctx, part, key, []byte("racer")); err != nil {
		t.Fatal(err)
	}
	pt.Release()
	if err := <-done; !errors.Is(err, kv.ErrPredicateFailed) {
		t.Fatalf("held SetIf: %v, want ErrPredicateFailed", err)
	}
	// The point fired once: the next SetIf passes straight through.
	_, pred, _ := s.Get(ctx, part, key)
	if err := s.SetIf(ctx, part, key, []byte("again"), pred); err != nil {
		t.Fatal(err)
	}
}

// After holds an operation that was applied but not yet answered.
func TestPauseStoreAfterIsApplied(t *testing.T) {
	ctx := context.Background()
	s := kvtest.NewPauseStore(kv.NewMemoryStore())
	defer s.Close()
	pt := s.Pause(kvtest.After, func(op kvtest.Op) bool { return op.Name == "set" })
	done := make(chan error, 1)
	go func() { done <- s.Set(ctx, []byte("p"), []byte("k"), []byte("v")) }()
	pt.Wait(t, 5*time.Second)
	if v, _, err := s.Inner().Get(ctx, []byte("p"), []byte("k")); err != nil || string(v) != "v" {
		t.Fatalf("held after apply: %q, %v", v, err)
	}
	select {
	case err := <-done:
		t.Fatalf("caller answered while held: %v", err)
	default:
	}
	pt.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
