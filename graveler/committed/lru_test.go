package committed

import (
	"fmt"
	"sync"
	"testing"
)

// TestLRUEviction checks that a lookup counts as a use for eviction and
// that the bound holds under concurrent use.
func TestLRUEviction(t *testing.T) {
	c := newLRU[int](3)
	for i := range 3 {
		c.set(fmt.Sprint("k", i), i, 1)
	}
	if v, ok := c.get("k0"); !ok || v != 0 {
		t.Fatalf("get(k0) = %d, %v", v, ok)
	}
	c.set("k3", 3, 1) // evicts k1, the least recently used since k0 was read
	if _, ok := c.get("k1"); ok {
		t.Fatal("k1 was not evicted")
	}
	for _, k := range []string{"k0", "k2", "k3"} {
		if _, ok := c.get(k); !ok {
			t.Fatalf("%s was evicted", k)
		}
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			key := fmt.Sprint("g", g)
			for i := range 1000 {
				c.set(key, i, 1)
				if v, ok := c.get(key); ok && v > i {
					t.Errorf("get(%s) = %d after set %d", key, v, i)
					return
				}
			}
		})
	}
	wg.Wait()
	if c.used > c.limit {
		t.Fatalf("cost %d over the bound %d", c.used, c.limit)
	}
}
