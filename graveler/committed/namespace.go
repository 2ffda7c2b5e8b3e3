package committed

import (
	"bytes"
	"context"
	"fmt"

	"graveler/graveler"
)

var _ graveler.NamespaceChecker = (*Manager)(nil)

// CheckNamespace writes data under name in ns, durably, and reads it back
// (graveler.NamespaceChecker). Existence is asked of the store behind any
// local cache, so a namespace that accepted the write but cannot be read
// fails here and not at the repository's first commit.
func (m *Manager) CheckNamespace(ctx context.Context, ns graveler.StorageNamespace, name string, data []byte) error {
	// The marker tells the cleaner whose namespace this is (it empties a
	// deleted repository's namespace only under its marker), so it must
	// outlive a crash as the repository record does.
	syncer, err := m.blobs.BeginWrites(ctx, ns)
	if err != nil {
		return err
	}
	defer syncer.Close()
	if err := m.blobs.Put(ctx, ns, name, data); err != nil {
		return err
	}
	if err := syncer.Sync(ctx); err != nil {
		return err
	}
	ok, err := m.blobs.Exists(ctx, ns, name)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%s %q: written, then not found", ns, name)
	}
	got, err := m.blobs.Get(ctx, ns, name)
	if err != nil {
		return err
	}
	if !bytes.Equal(got, data) {
		return fmt.Errorf("%s %q: read back %d bytes that differ from the %d written", ns, name, len(got), len(data))
	}
	return nil
}
