package ref

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// The readBatcher tests run in a synctest bubble: time is virtual and only
// advances when every goroutine of the bubble is blocked, so "arrives
// within the window" and "leaves before the window ends" are exact, not
// races against the wall clock, however loaded the machine.

func TestReadBatcherSharesOneRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const window = 50 * time.Millisecond
		b := newReadBatcher[int](window)
		var reads atomic.Int32
		start := time.Now()
		read := func(context.Context) (int, error) {
			if d := time.Since(start); d != window {
				t.Errorf("read started %v after the first caller, want the window %v", d, window)
			}
			return int(reads.Add(1)), nil
		}
		var wg sync.WaitGroup
		var joined atomic.Int32
		for range 10 {
			wg.Go(func() {
				v, j, err := b.do(t.Context(), "k", read)
				if err != nil || v != 1 {
					t.Errorf("got %d, %v; want the shared first read", v, err)
				}
				if j {
					joined.Add(1)
				}
			})
		}
		wg.Wait()
		if reads.Load() != 1 || joined.Load() != 9 {
			t.Fatalf("10 callers within the window: %d reads, %d joined; want 1 read, 9 joined", reads.Load(), joined.Load())
		}
		// Different keys never share, and the closed batch is not reused.
		for _, key := range []string{"other", "k"} {
			start = time.Now()
			v, j, err := b.do(t.Context(), key, read)
			if err != nil || j || v != int(reads.Load()) {
				t.Fatalf("key %s after the batch: %d joined=%v %v; want a fresh read", key, v, j, err)
			}
		}
		if reads.Load() != 3 {
			t.Fatalf("%d reads, want 3", reads.Load())
		}
	})
}

func TestReadBatcherSharesErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newReadBatcher[int](10 * time.Millisecond)
		boom := errors.New("boom")
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				if _, _, err := b.do(t.Context(), "k", func(context.Context) (int, error) { return 0, boom }); !errors.Is(err, boom) {
					t.Errorf("got %v, want the shared read's error", err)
				}
			})
		}
		wg.Wait()
	})
}

func TestReadBatcherNoJoinAfterReadStarted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newReadBatcher[int](time.Millisecond)
		started := make(chan struct{})
		release := make(chan struct{})
		first := make(chan int)
		go func() {
			v, _, _ := b.do(t.Context(), "k", func(context.Context) (int, error) {
				close(started)
				<-release
				return 1, nil
			})
			first <- v
		}()
		<-started
		v, joined, err := b.do(t.Context(), "k", func(context.Context) (int, error) { return 2, nil })
		if err != nil || joined || v != 2 {
			t.Fatalf("a caller arriving during a read joined it: %d %v %v", v, joined, err)
		}
		close(release)
		if v := <-first; v != 1 {
			t.Fatalf("first = %d", v)
		}
	})
}

func TestReadBatcherCancellation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newReadBatcher[int](30 * time.Millisecond)
		// The first caller leaves; the one that joined still gets the result.
		ctx, cancel := context.WithCancel(t.Context())
		res := make(chan error, 1)
		go func() {
			_, _, err := b.do(ctx, "k", func(context.Context) (int, error) { return 7, nil })
			res <- err
		}()
		time.Sleep(5 * time.Millisecond)
		type result struct {
			v      int
			joined bool
			err    error
		}
		done := make(chan result, 1)
		go func() {
			v, j, err := b.do(t.Context(), "k", func(context.Context) (int, error) { return 8, nil })
			done <- result{v, j, err}
		}()
		time.Sleep(5 * time.Millisecond)
		cancel()
		if err := <-res; !errors.Is(err, context.Canceled) {
			t.Fatalf("leaver got %v, want context.Canceled", err)
		}
		if r := <-done; r.err != nil || !r.joined || r.v != 7 {
			t.Fatalf("stayer got %d joined=%v %v; want the batch's read (7)", r.v, r.joined, r.err)
		}

		// When every caller leaves before the window ends, the read never
		// runs, and a later caller starts afresh instead of joining the
		// abandoned batch.
		var abandonedReads atomic.Int32
		ctx2, cancel2 := context.WithCancel(t.Context())
		left := make(chan error, 1)
		go func() {
			_, _, err := b.do(ctx2, "k2", func(context.Context) (int, error) {
				abandonedReads.Add(1)
				return 0, nil
			})
			left <- err
		}()
		time.Sleep(5 * time.Millisecond)
		cancel2()
		if err := <-left; !errors.Is(err, context.Canceled) {
			t.Fatalf("leaver got %v, want context.Canceled", err)
		}
		synctest.Wait() // the abandoned batch's goroutine has finished
		if n := abandonedReads.Load(); n != 0 {
			t.Fatalf("an abandoned batch read %d times, want 0", n)
		}
		v, joined, err := b.do(t.Context(), "k2", func(context.Context) (int, error) { return 3, nil })
		if err != nil || joined || v != 3 {
			t.Fatalf("after abandon: %d joined=%v %v; want a fresh read (3)", v, joined, err)
		}
		time.Sleep(time.Hour) // far past every window: still nothing read by the abandoned batch
		if n := abandonedReads.Load(); n != 0 {
			t.Fatalf("an abandoned batch read %d times, want 0", n)
		}
	})
}

// Group mode (window 0): a lone caller reads at once; callers arriving
// while a read is in flight do not share it (it began before they arrived)
// but share the next one, which starts when the current one ends.
func TestReadBatcherGroupMode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newReadBatcher[int](0)
		var reads atomic.Int32
		release := make(chan struct{})
		read := func(context.Context) (int, error) {
			n := int(reads.Add(1))
			if n == 1 {
				<-release // the first read stays in flight while others arrive
			}
			return n, nil
		}
		start := time.Now()
		first := make(chan int, 1)
		go func() {
			v, j, err := b.do(t.Context(), "k", read)
			if err != nil || j {
				t.Errorf("first caller: joined=%v %v", j, err)
			}
			first <- v
		}()
		synctest.Wait()
		if reads.Load() != 1 || time.Since(start) != 0 {
			t.Fatalf("a lone caller: %d reads after %v; want one read at once", reads.Load(), time.Since(start))
		}
		var wg sync.WaitGroup
		var joined atomic.Int32
		for range 5 {
			wg.Go(func() {
				v, j, err := b.do(t.Context(), "k", read)
				if err != nil || v != 2 {
					t.Errorf("a caller arriving during the first read got %d, %v; want the next read (2)", v, err)
				}
				if j {
					joined.Add(1)
				}
			})
		}
		synctest.Wait()
		if reads.Load() != 1 {
			t.Errorf("%d reads while the first is in flight; the next must wait for it", reads.Load())
		}
		close(release)
		wg.Wait()
		if v := <-first; v != 1 {
			t.Fatalf("first caller got %d, want 1", v)
		}
		if reads.Load() != 2 || joined.Load() != 4 {
			t.Fatalf("%d reads, %d joined; want 2 reads (the first, then one shared by the 5 later callers, 4 of them joining)", reads.Load(), joined.Load())
		}
		// Idle again: the next caller reads at once, alone.
		v, j, err := b.do(t.Context(), "k", read)
		if err != nil || j || v != 3 {
			t.Fatalf("after the burst: %d joined=%v %v; want a fresh read (3)", v, j, err)
		}
	})
}
