package ref

import (
	"container/list"
	"maps"
	"slices"
	"sync"

	"graveler/graveler"
)

// commitCache is a bounded LRU of decoded commit records, keyed by
// repository partition and commit id. Commits never change, and a
// partition names one repository incarnation, so an entry is never stale.
type commitCache struct {
	limit int
	mu    sync.Mutex
	lru   *list.List // of *commitCacheEntry, most recent first
	index map[string]*list.Element
}

type commitCacheEntry struct {
	key    string
	commit *graveler.Commit
}

func newCommitCache(limit int) *commitCache {
	return &commitCache{limit: limit, lru: list.New(), index: map[string]*list.Element{}}
}

func cloneCommit(c *graveler.Commit) *graveler.Commit {
	out := *c
	out.Parents = slices.Clone(c.Parents)
	out.Metadata = maps.Clone(c.Metadata)
	return &out
}

// get returns a copy the caller may modify.
func (c *commitCache) get(key string) (*graveler.Commit, bool) {
	if c.limit <= 0 {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.index[key]
	if !ok {
		return nil, false
	}
	c.lru.MoveToFront(el)
	return cloneCommit(el.Value.(*commitCacheEntry).commit), true
}

func (c *commitCache) add(key string, commit *graveler.Commit) {
	if c.limit <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.index[key]; ok {
		c.lru.MoveToFront(el)
		return
	}
	c.index[key] = c.lru.PushFront(&commitCacheEntry{key: key, commit: cloneCommit(commit)})
	for c.lru.Len() > c.limit {
		old := c.lru.Back()
		c.lru.Remove(old)
		delete(c.index, old.Value.(*commitCacheEntry).key)
	}
}
