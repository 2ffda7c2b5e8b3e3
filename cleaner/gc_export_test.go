package cleaner

import (
	"context"
	"time"

	"graveler/graveler"
)

// SetGCHooks makes c's collections call afterMark once every root is read
// and before any namespace is swept, and beforeDelete before an object
// found unreferenced is checked again and deleted. Nil hooks do nothing.
func (c *Cleaner) SetGCHooks(afterMark func(), beforeDelete func(ns graveler.StorageNamespace, name string)) {
	c.gcHooks = &gcHooks{afterMark: afterMark, beforeDelete: beforeDelete}
}

// Collect runs one collection and no reclaim, as RunOnce would run it.
func (c *Cleaner) Collect(ctx context.Context) (Summary, error) {
	r := &pass{c: c, ctx: ctx, parent: ctx, dropped: map[string]bool{}, badRecords: map[string]bool{}, unsure: map[string]bool{}}
	r.sum.DryRun = c.cfg.DryRun
	start := time.Now()
	r.collect()
	r.sum.Duration = time.Since(start)
	return r.sum, ctx.Err()
}

// SetGCRemoveHook makes c's collections call beforeRemove once an object
// was checked again (found old) and right before it is deleted.
func SetGCRemoveHook(c *Cleaner, beforeRemove func(ns graveler.StorageNamespace, name string)) {
	if c.gcHooks == nil {
		c.gcHooks = &gcHooks{}
	}
	c.gcHooks.beforeRemove = beforeRemove
}
