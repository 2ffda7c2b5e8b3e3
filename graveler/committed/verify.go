package committed

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"graveler/graveler"
)

// The functions below check stored objects for a consistency checker
// (package fsck) and a collector (the cleaner's GC). They read the blob
// store directly, never through a Manager's caches: a check must see what
// is stored now, and checking an object once must not evict what a
// serving Manager keeps warm.

// TreeNode is a verified inner node of a tree (a root is one too).
type TreeNode struct {
	// Level is 1 for a node whose children are ranges, n for one whose
	// children are nodes of level n-1.
	Level int
	// Children in key order, not overlapping.
	Children []RangeDescriptor
	// RecordsSize is the total of the node's encoded child entries: the
	// EstimatedSize its parent's entry for it must hold.
	RecordsSize int
	// Size is its size in bytes in the store.
	Size int
}

// ReadTreeNode reads inner node (or root) id from ns and checks it: its
// bytes hash to id, checksums hold, children are in key order, not
// overlapping, with valid IDs. Errors: ErrInvalidID for a malformed id; an
// error wrapping both graveler.ErrMetaRangeNotFound and ErrBlobNotFound
// when it is not stored; ErrCorrupt when it is damaged; a blob store
// failure wrapped.
func ReadTreeNode(ctx context.Context, blobs BlobStore, ns graveler.StorageNamespace, id graveler.MetaRangeID) (*TreeNode, error) {
	if err := checkMetaRangeID(id); err != nil {
		return nil, err
	}
	n, err := readTreeNode(ctx, blobs, ns, id, Location{})
	if errors.Is(err, ErrBlobNotFound) {
		return nil, fmt.Errorf("%w: %w", graveler.ErrMetaRangeNotFound, err)
	}
	return n, err
}

// ReadChildNode reads and checks, as ReadTreeNode does, the inner node a
// node's entry d names, where d.Loc places it. A missing one is an error
// wrapping ErrBlobNotFound (a hole in a tree, not a missing tree).
func ReadChildNode(ctx context.Context, blobs BlobStore, ns graveler.StorageNamespace, d RangeDescriptor) (*TreeNode, error) {
	id := graveler.MetaRangeID(d.ID)
	if err := checkMetaRangeID(id); err != nil {
		return nil, err
	}
	return readTreeNode(ctx, blobs, ns, id, d.Loc)
}

func readTreeNode(ctx context.Context, blobs BlobStore, ns graveler.StorageNamespace, id graveler.MetaRangeID, loc Location) (*TreeNode, error) {
	data, err := readStored(ctx, blobs, ns, metaRangeBlobName(id), loc)
	if err != nil {
		return nil, fmt.Errorf("committed: read metarange %s%s: %w", id, where(loc), err)
	}
	n, err := decodeStoredNode(data, string(id))
	if err != nil {
		return nil, fmt.Errorf("committed: metarange %s%s: %w", id, where(loc), err)
	}
	return &TreeNode{Level: n.level, Children: n.children, RecordsSize: n.size, Size: n.stored}, nil
}

// readStored reads an object stored at loc, or on its own under name. A
// slice past its pack's end is ErrCorrupt: the pack or the entry naming
// the slice is damaged.
func readStored(ctx context.Context, blobs BlobStore, ns graveler.StorageNamespace, name string, loc Location) ([]byte, error) {
	if !loc.Packed() {
		return blobs.Get(ctx, ns, name)
	}
	data, err := blobs.GetRange(ctx, ns, packsPrefix+loc.Pack, loc.Offset, loc.Length)
	if errors.Is(err, ErrShortBlob) {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return data, err
}

// where describes loc for an error message.
func where(loc Location) string {
	if !loc.Packed() {
		return ""
	}
	return fmt.Sprintf(" (pack %s at %d+%d)", loc.Pack, loc.Offset, loc.Length)
}

// Matches checks a verified inner node against the entry d naming it in
// a parent of level parentLevel: one level below it, its first and last
// keys d's bounds, d.Count entries below it and d.EstimatedSize bytes of
// entries. The error wraps ErrCorrupt.
func (n *TreeNode) Matches(d RangeDescriptor, parentLevel int) error {
	count := 0
	for _, c := range n.Children {
		count += c.Count
	}
	minKey, maxKey := n.Children[0].MinKey, n.Children[len(n.Children)-1].MaxKey
	switch {
	case n.Level != parentLevel-1:
		return fmt.Errorf("%w: metarange %s is of level %d under a node of level %d", ErrCorrupt, d.ID, n.Level, parentLevel)
	case bytes.Compare(minKey, d.MinKey) < 0 || bytes.Compare(maxKey, d.MaxKey) > 0:
		return fmt.Errorf("%w: metarange %s holds keys [%q, %q] outside its parent's bounds [%q, %q]", ErrCorrupt, d.ID, minKey, maxKey, d.MinKey, d.MaxKey)
	case !bytes.Equal(minKey, d.MinKey) || !bytes.Equal(maxKey, d.MaxKey):
		return fmt.Errorf("%w: metarange %s holds keys [%q, %q], its parent's entry says [%q, %q]", ErrCorrupt, d.ID, minKey, maxKey, d.MinKey, d.MaxKey)
	case count != d.Count:
		return fmt.Errorf("%w: metarange %s holds %d entries, its parent's entry says %d", ErrCorrupt, d.ID, count, d.Count)
	case n.RecordsSize != d.EstimatedSize:
		return fmt.Errorf("%w: metarange %s holds %d bytes of entries, its parent's entry says %d", ErrCorrupt, d.ID, n.RecordsSize, d.EstimatedSize)
	}
	return nil
}

// ReadMetaRange reads every inner node of tree id from ns, checking each
// as ReadTreeNode does and that each is at the level its parent says, and
// returns the tree's ranges in key order. The empty tree "" has none.
// Errors: those of ReadTreeNode (graveler.ErrMetaRangeNotFound only for a
// missing root; a missing inner node wraps ErrBlobNotFound).
func ReadMetaRange(ctx context.Context, blobs BlobStore, ns graveler.StorageNamespace, id graveler.MetaRangeID) ([]RangeDescriptor, error) {
	if id == "" {
		return nil, nil
	}
	root, err := ReadTreeNode(ctx, blobs, ns, id)
	if err != nil {
		return nil, err
	}
	var out []RangeDescriptor
	err = walkInner(ctx, blobs, ns, root, nil, func(n *TreeNode) error {
		if n.Level == 1 {
			out = append(out, n.Children...)
		}
		return nil
	})
	return out, err
}

// walkInner reads every inner node below n, depth first in key order,
// and calls visit with n and then with each node read, before its
// children. enter, when not nil, is asked about each inner child entry
// before it is read; false skips that subtree.
func walkInner(ctx context.Context, blobs BlobStore, ns graveler.StorageNamespace, n *TreeNode, enter func(RangeDescriptor) (bool, error), visit func(*TreeNode) error) error {
	if err := visit(n); err != nil {
		return err
	}
	if n.Level == 1 {
		return nil
	}
	for _, d := range n.Children {
		if enter != nil {
			ok, err := enter(d)
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
		}
		c, err := readInner(ctx, blobs, ns, d, n.Level)
		if err != nil {
			return err
		}
		if err := walkInner(ctx, blobs, ns, c, enter, visit); err != nil {
			return err
		}
	}
	return nil
}

// readInner reads the inner node d names in a node of level parent.
func readInner(ctx context.Context, blobs BlobStore, ns graveler.StorageNamespace, d RangeDescriptor, parent int) (*TreeNode, error) {
	c, err := ReadChildNode(ctx, blobs, ns, d)
	if errors.Is(err, ErrBlobNotFound) {
		// Not the tree missing: a hole in it.
		return nil, fmt.Errorf("committed: inner node %s: %w", d.blobName(parent), ErrBlobNotFound)
	}
	if err != nil {
		return nil, err
	}
	if c.Level != parent-1 {
		return nil, fmt.Errorf("%w: metarange %s is of level %d under a node of level %d", ErrCorrupt, d.ID, c.Level, parent)
	}
	return c, nil
}

// RangeExists reports whether range id is stored in ns where loc places
// it (its pack, or its own object), without reading it. ErrInvalidID for
// a malformed id.
func RangeExists(ctx context.Context, blobs BlobStore, ns graveler.StorageNamespace, id graveler.RangeID, loc Location) (bool, error) {
	if !validID(string(id)) {
		return false, fmt.Errorf("%w: range %q", ErrInvalidID, id)
	}
	d := RangeDescriptor{ID: id, Loc: loc}
	ok, err := blobs.Exists(ctx, ns, d.blobName(1))
	if err != nil {
		return false, fmt.Errorf("committed: stat range %s%s: %w", id, where(loc), err)
	}
	return ok, nil
}

// RangeSummary is what VerifyRange learned of a range's content: its
// first and last keys, its records, its size in bytes and the total of
// its encoded records.
type RangeSummary struct {
	MinKey, MaxKey graveler.Key
	Count          int
	Size           int
	RecordsSize    int
}

// VerifyRange reads range id from ns, where loc places it, and checks it
// completely: its bytes
// hash to id, every checksum holds, every record decodes, and keys are
// non-empty and strictly increasing. Errors: ErrInvalidID for a malformed
// id; an error wrapping ErrBlobNotFound when it is not stored; ErrCorrupt
// when it is damaged; a blob store failure wrapped.
func VerifyRange(ctx context.Context, blobs BlobStore, ns graveler.StorageNamespace, id graveler.RangeID, loc Location) (RangeSummary, error) {
	if !validID(string(id)) {
		return RangeSummary{}, fmt.Errorf("%w: range %q", ErrInvalidID, id)
	}
	data, err := readStored(ctx, blobs, ns, rangeBlobName(id), loc)
	if err != nil {
		return RangeSummary{}, fmt.Errorf("committed: read range %s%s: %w", id, where(loc), err)
	}
	if got := contentID(data); got != string(id) {
		return RangeSummary{}, fmt.Errorf("%w: range %s: content hashes to %s", ErrCorrupt, id, got)
	}
	f, err := parseRange(data)
	if err != nil {
		return RangeSummary{}, fmt.Errorf("committed: range %s: %w", id, err)
	}
	if f.version != leafVersion {
		return RangeSummary{}, fmt.Errorf("%w: range %s has an inner node's format", ErrCorrupt, id)
	}
	if f.count == 0 {
		// The writer never stores an empty range: a node's entry needs
		// a first and a last key.
		return RangeSummary{}, fmt.Errorf("%w: range %s holds no records", ErrCorrupt, id)
	}
	records := 0
	for _, b := range f.blocks {
		records += b.n
	}
	// Copies: the summary may be kept long after data is released.
	return RangeSummary{
		MinKey:      bytes.Clone(f.blocks[0].first),
		MaxKey:      bytes.Clone(f.lastKey()),
		Count:       f.count,
		Size:        len(data),
		RecordsSize: records,
	}, nil
}

// Matches checks a verified range against the node entry that names it:
// every key within [d.MinKey, d.MaxKey], with those two keys its first
// and last (the writer records them so), d.Count records and
// d.EstimatedSize bytes of them. A range reaching outside its entry's
// bounds would hide keys from lookups, which search the nodes by those
// bounds. The error wraps ErrCorrupt.
func (s RangeSummary) Matches(d RangeDescriptor) error {
	switch {
	case bytes.Compare(s.MinKey, d.MinKey) < 0 || bytes.Compare(s.MaxKey, d.MaxKey) > 0:
		return fmt.Errorf("%w: range %s holds keys [%q, %q] outside its metarange bounds [%q, %q]", ErrCorrupt, d.ID, s.MinKey, s.MaxKey, d.MinKey, d.MaxKey)
	case !bytes.Equal(s.MinKey, d.MinKey) || !bytes.Equal(s.MaxKey, d.MaxKey):
		return fmt.Errorf("%w: range %s holds keys [%q, %q], its metarange entry says [%q, %q]", ErrCorrupt, d.ID, s.MinKey, s.MaxKey, d.MinKey, d.MaxKey)
	case s.Count != d.Count:
		return fmt.Errorf("%w: range %s holds %d records, its metarange entry says %d", ErrCorrupt, d.ID, s.Count, d.Count)
	case s.RecordsSize != d.EstimatedSize:
		return fmt.Errorf("%w: range %s holds %d bytes of records, its metarange entry says %d", ErrCorrupt, d.ID, s.RecordsSize, d.EstimatedSize)
	}
	return nil
}

// ErrSkipSubtree, returned by TreeObjects' fn for an inner node, skips
// that node's subtree: it is neither read nor walked.
var ErrSkipSubtree = errors.New("committed: skip this subtree")

// TreeObject is one object of a tree, as TreeObjects reports it.
type TreeObject struct {
	// Kind is ObjectMetaRange for the root and the inner nodes,
	// ObjectRange for a range.
	Kind ObjectKind
	// ID is the object's ID.
	ID string
	// Blob names the blob that holds this copy of it: the object's own
	// (Name) or, when the tree names a copy in a pack, the pack.
	Blob string
}

// Name is the object's own blob name, RangesPrefix or MetaRangesPrefix
// followed by its ID, whether or not it is stored under it: the name a
// collector knows an object by, wherever its copies are.
func (o TreeObject) Name() string {
	if o.Kind == ObjectRange {
		return rangesPrefix + o.ID
	}
	return metarangesPrefix + o.ID
}

// TreeObjects calls fn with every object tree id references, the root
// first and every node before its children, reading the tree's inner
// nodes (where their parents place them) with blobs and checking each as
// ReadMetaRange does (through a CachedBlobStore, an object deleted from
// the store may still be read: CheckTreeStored asks Exists of each blob).
// Ranges are named, not read. fn may be called more than once with one
// object when subtrees are shared, unless it returns ErrSkipSubtree for
// the node (for a range that return is ignored). The same entries make
// the same objects, so a subtree skipped because its ID was seen holds
// the same objects as the one seen, though perhaps other copies of them.
// The empty tree "" has no objects. Errors: those of ReadMetaRange, and
// fn's.
func TreeObjects(ctx context.Context, blobs BlobStore, ns graveler.StorageNamespace, id graveler.MetaRangeID, fn func(TreeObject) error) error {
	if id == "" {
		return nil
	}
	root, err := ReadTreeNode(ctx, blobs, ns, id)
	if err != nil {
		return err
	}
	if err := fn(TreeObject{Kind: ObjectMetaRange, ID: string(id), Blob: metaRangeBlobName(id)}); err != nil {
		if errors.Is(err, ErrSkipSubtree) {
			return nil
		}
		return err
	}
	enter := func(d RangeDescriptor) (bool, error) {
		err := fn(TreeObject{Kind: ObjectMetaRange, ID: string(d.ID), Blob: d.blobName(2)})
		if errors.Is(err, ErrSkipSubtree) {
			return false, nil
		}
		return err == nil, err
	}
	return walkInner(ctx, blobs, ns, root, enter, func(n *TreeNode) error {
		if n.Level != 1 {
			return nil
		}
		for i := range n.Children {
			d := &n.Children[i]
			if err := fn(TreeObject{Kind: ObjectRange, ID: string(d.ID), Blob: d.blobName(1)}); err != nil && !errors.Is(err, ErrSkipSubtree) {
				return err
			}
		}
		return nil
	})
}

// CheckTreeStored returns nil when every object of tree id is stored in
// ns as the tree names it, asking the blob store itself with Exists for
// each blob (once each), inner nodes and packs included: that a node
// could be read proves nothing, since a CachedBlobStore serves its copy
// of an object deleted from the store. Otherwise: an error wrapping
// ErrBlobNotFound naming the first blob found missing (and, for the
// root, graveler.ErrMetaRangeNotFound), or a read failure.
func CheckTreeStored(ctx context.Context, blobs BlobStore, ns graveler.StorageNamespace, id graveler.MetaRangeID) error {
	seen := map[string]bool{}
	return TreeObjects(ctx, blobs, ns, id, func(o TreeObject) error {
		if seen[o.Blob] {
			return nil
		}
		seen[o.Blob] = true
		ok, err := blobs.Exists(ctx, ns, o.Blob)
		if err != nil {
			return fmt.Errorf("committed: stat %s: %w", o.Blob, err)
		}
		if !ok && o.Blob == metaRangeBlobName(id) {
			return fmt.Errorf("committed: root %s of tree %s: %w: %w", o.Blob, id, graveler.ErrMetaRangeNotFound, ErrBlobNotFound)
		}
		if !ok {
			return fmt.Errorf("committed: %s of tree %s: %w", o.Blob, id, ErrBlobNotFound)
		}
		return nil
	})
}
