package gcfence

import (
	"context"
	"errors"
	"fmt"

	"graveler/graveler"
	"graveler/graveler/committed"
)

// Wrap returns m with every call that writes a tree (Apply, Merge,
// WriteMetaRangeByIterator) fenced against sweeps: Begin before, Settle
// after, and when a sweep may have overlapped, a check through blobs (the
// store m writes to) that every object of the new tree is stored. Reads
// pass straight through, and so does CheckNamespace when m has it.
func Wrap(m graveler.CommittedManager, blobs committed.BlobStore, f *Fence) graveler.CommittedManager {
	return &fenced{CommittedManager: m, blobs: blobs, f: f}
}

type fenced struct {
	graveler.CommittedManager
	blobs committed.BlobStore
	f     *Fence
}

// CheckNamespace keeps graveler.NamespaceChecker reachable through the
// wrapper; a manager without it checks nothing, as before.
func (w *fenced) CheckNamespace(ctx context.Context, ns graveler.StorageNamespace, name string, data []byte) error {
	if nc, ok := w.CommittedManager.(graveler.NamespaceChecker); ok {
		return nc.CheckNamespace(ctx, ns, name, data)
	}
	return nil
}

// write runs one tree write between Begin and Settle.
func (w *fenced) write(ctx context.Context, ns graveler.StorageNamespace, op func() (graveler.MetaRangeID, error)) (graveler.MetaRangeID, error) {
	tok, err := w.f.Begin(ctx, ns)
	if err != nil {
		return "", err
	}
	id, err := op()
	if err != nil {
		return id, err
	}
	overlapped, err := w.f.Settle(ctx, ns, tok)
	if err != nil {
		return "", err
	}
	if !overlapped || id == "" {
		return id, nil
	}
	if err := committed.CheckTreeStored(ctx, w.blobs, ns, id); err != nil {
		if errors.Is(err, committed.ErrBlobNotFound) {
			return "", fmt.Errorf("%w: tree %s in %s: %w", ErrSwept, id, ns, err)
		}
		return "", err
	}
	return id, nil
}

func (w *fenced) Apply(ctx context.Context, ns graveler.StorageNamespace, base graveler.MetaRangeID, changes graveler.ValueIterator, opts graveler.ApplyOptions) (graveler.MetaRangeID, graveler.DiffSummary, error) {
	var sum graveler.DiffSummary
	id, err := w.write(ctx, ns, func() (graveler.MetaRangeID, error) {
		var (
			id  graveler.MetaRangeID
			err error
		)
		id, sum, err = w.CommittedManager.Apply(ctx, ns, base, changes, opts)
		return id, err
	})
	return id, sum, err
}

func (w *fenced) Merge(ctx context.Context, ns graveler.StorageNamespace, destination, source, base graveler.MetaRangeID, strategy graveler.MergeStrategy) (graveler.MetaRangeID, graveler.DiffSummary, error) {
	var sum graveler.DiffSummary
	id, err := w.write(ctx, ns, func() (graveler.MetaRangeID, error) {
		var (
			id  graveler.MetaRangeID
			err error
		)
		id, sum, err = w.CommittedManager.Merge(ctx, ns, destination, source, base, strategy)
		return id, err
	})
	return id, sum, err
}

func (w *fenced) WriteMetaRangeByIterator(ctx context.Context, ns graveler.StorageNamespace, it graveler.ValueIterator) (graveler.MetaRangeID, error) {
	return w.write(ctx, ns, func() (graveler.MetaRangeID, error) {
		return w.CommittedManager.WriteMetaRangeByIterator(ctx, ns, it)
	})
}
