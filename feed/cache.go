package feed

import (
	"container/list"
	"sync"

	"graveler/graveler"
)

// commitCache is a bounded LRU of decoded commit records, keyed by
// repository partition and commit id. Commit records are immutable, so an
// entry never goes stale. Safe for concurrent use: the hub and every
// catch-up share one.
type commitCache struct {
	mu    sync.Mutex
	max   int
	order *list.List // front: most recently used
	items map[string]*list.Element
}

type cached struct {
	key    string
	commit *graveler.Commit
}

func newCommitCache(max int) *commitCache {
	return &commitCache{max: max, order: list.New(), items: map[string]*list.Element{}}
}

func (c *commitCache) get(key string) (*graveler.Commit, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[key]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(el)
	return el.Value.(*cached).commit, true
}

func (c *commitCache) put(key string, commit *graveler.Commit) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		c.order.MoveToFront(el)
		return
	}
	c.items[key] = c.order.PushFront(&cached{key: key, commit: commit})
	for c.order.Len() > c.max {
		old := c.order.Back()
		c.order.Remove(old)
		delete(c.items, old.Value.(*cached).key)
	}
}
