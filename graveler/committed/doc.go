// Package committed stores committed entries: it implements
// graveler.CommittedManager (Manager) over a BlobStore, and owns the tree
// of ranges and inner nodes, its file formats, its content-defined
// boundaries at every level and the in-memory caches of decoded objects.
//
// # Objects
//
// A tree is a B-tree-like structure of immutable objects. Its leaves are
// ranges: sorted files of (key, identity, data) records, stored at
// "_graveler/ranges/<id>". Above them are inner nodes, stored at
// "_graveler/metaranges/<id>": a node of level 1 lists ranges, a node of
// level n lists nodes of level n-1, each child as (max key, id, min key,
// count of entries below it, size of its own records). The root is the
// one node of the top level, and its ID is the tree's MetaRangeID; inner
// nodes and roots share the prefix and the format, so a collector or a
// checker needs no new place to look. An ID is the lowercase hex SHA-256
// of the object's bytes, checked on every read. The metarange ID "" is
// the empty tree: it is accepted everywhere, always exists, and is never
// stored. Writing no entries yields "".
//
// # File format
//
// Ranges and nodes share one container. All integers are little-endian;
// uvarint is encoding/binary's unsigned varint; crc32c is CRC-32 with the
// Castagnoli polynomial.
//
//	file   = block* index footer
//	block  = record+ crc32c(records)              ; sealed once >= BlockSize
//	record = uvarint(len) key uvarint(len) identity uvarint(len) data
//	index  = uvarint(nblocks) entry* crc32c(entries and count)
//	entry  = uvarint(len) firstKey uvarint(len) lastKey
//	         uvarint(offset) uvarint(length) uvarint(records)
//	footer = u64 indexOffset, u64 indexLength (without its crc),
//	         u64 records, [u32 level,] u32 magic 0x47524e47, u32 version,
//	         u32 crc32c(the preceding footer bytes)
//
// Version 1 (no level) is a range, or the root of a tree written by the
// one-level format this package wrote before (a single "metarange" of
// ranges, with each range's ID as 64 hex digits for identity); such a
// root reads as a node of level 1, so those trees stay readable and
// writable: a write onto one yields a tree of the current format (sharing
// its untouched ranges). Version 2 (with level >= 1) is an inner node:
// one record per child, key = the child's MaxKey, identity = its ID as 32
// raw bytes, data = uvarint(len) MinKey uvarint(Count) uvarint(size).
// Keying by MaxKey lets a lookup find the one child that can hold a key
// with a single search.
//
// An entry's offset and length locate the block's records (its crc follows
// them); blocks are contiguous from offset 0 and the index follows the last
// one. Keys are non-empty and strictly increasing across the file. A reader
// checks every checksum and walks every record once when it loads a file,
// so any damage is reported then as an error wrapping ErrCorrupt; a node
// whose children are out of order, overlapping, or at another level than
// its own minus one is corrupt too. SeekGE binary-searches the index by
// lastKey and scans one block.
//
// # Boundaries
//
// Every level is cut by content. A range ends after a record when its
// encoded records reach MaxRangeSize (default 64 KiB), or reach
// MinRangeSize (default 2 KiB) and the key's boundary hash — 64-bit
// FNV-1a finished with MurmurHash3's fmix64 — has the bits of
// BoundaryMask (default 0x1f) all zero: about 32 records past the minimum,
// a range of 4–6 KiB for entries of ~90 bytes. A node ends after a child
// entry by the same rule over its own entries with MinNodeSize (2 KiB),
// MaxNodeSize (32 KiB) and NodeMask (0x3f), testing a hash of the child's
// MaxKey mixed with the node's level (so a level's cuts are independent of
// the cuts below it, whose keys all passed the lower test): nodes of about
// 90 children, 8 KiB. The root is the node being filled at the lowest
// level with nothing above it when the stream ends.
//
// A boundary depends only on the entries since the previous one, so an
// unchanged stretch of keys yields the same ranges and nodes, and the same
// entries yield the same tree (the same root ID) however they were
// written — in bulk, or by any sequence of Apply — under one Config.
//
// Apply walks the base tree with the sorted changes. A subtree (at any
// level) no change falls in is passed through by reference, unread, when
// the writer stands at a boundary at its level and the subtree ended by
// its level's rule (or nothing at all follows it); a subtree on the base's
// right edge did not necessarily end by a rule, its last child having
// been cut by the end of the stream, so it passes only when nothing
// follows it. Otherwise Apply descends into it. A change therefore
// rewrites the range it falls in and the nodes above it (plus what a
// moved boundary drags in), O(levels) objects. Objects are written by
// Config.WriteParallelism goroutines; a failed write fails the Apply, and
// the root is written only after every other object is. Diff (and so
// Merge) skips a pair of subtrees with equal IDs at equal levels without
// reading either, descending one level at a time where they differ; Get
// and SeekGE descend one path.
//
// # Durability
//
// A tree's ID is handed out only once every object under it is durable,
// since a commit record naming it may be stored at once: a writer takes a
// Syncer (BlobStore.BeginWrites) before its first write and syncs it
// after writing the root, while it checks the children's times, and
// again once the check is done (which costs little: the first flushed
// the writes), so what the check touched or relied on is durable too.
// A file:// namespace writes each new object
// without an fsync and syncs with one syncfs of its file system (on
// Linux; elsewhere every object is fsynced as it is written), which also
// covers the touched objects' times and the new directory entries. The
// Syncer's descriptor is opened before the writes, so a write-back
// failure met meanwhile fails its sync even if another writer's sync saw
// it first (Linux 5.8 and later report such failures to syncfs; older
// kernels do not). An object stored again over an existing file (the same
// content: a revert, a retried commit) is fsynced before its rename, as
// the file it replaces may be durable and named by a recorded commit. An
// S3 Put is durable when it returns.
//
// # Caches
//
// Decoded inner nodes are kept in an LRU bounded by their stored bytes
// (NodeCacheBytes, default 64 MiB), and decoded ranges in one bounded
// likewise (RangeCacheBytes, default 64 MiB), keyed by namespace and ID.
// Objects never change, so nothing is ever invalidated. Apply reads the
// ranges its changes fall in ahead of its walk (16 at a time, from a
// window of 1,024 changes); one range is read once however many readers
// want it at the same time.
//
// # Verification
//
// ReadTreeNode, ReadMetaRange (every inner node of a tree, returning its
// ranges), RangeExists, VerifyRange, TreeObjects and CheckTreeStored check
// stored objects for a consistency checker (package fsck) and a collector,
// reading the blob store directly and bypassing the caches;
// RangeSummary.Matches and TreeNode.Matches compare a verified object with
// the entry its parent holds for it (bounds, count, size). They are safe
// for concurrent use.
//
// # Garbage collection
//
// A Manager never deletes an object. A collector (the cleaner's GC)
// marks every object of every tree a commit references (TreeObjects; a
// subtree already marked is not walked again) and deletes the objects
// no commit references once their modification time (BlobStore.List,
// Stat) is older than its grace period, measured from when it began
// reading the commits. A commit recorded after that must therefore
// reference only objects modified since, and so a tree's ID is handed out
// only once every child each new node references was written or touched
// (BlobStore.Touch) within Config.GCGrace/2: Apply passes subtrees
// through from its base without writing them, and a long write may have
// written its first objects long before its root. Only the children the
// new nodes name directly are refreshed, not the descendants of a
// passed-through subtree: those belong to the base's tree, which a
// collection that read the base's commit marks whole. Two rules follow:
// the collector's grace is at least GCGrace, and a commit stores its
// record within GCGrace/2 of receiving its tree's ID. A Manager remembers (for
// between half a million and a million objects, about 30 MB) when it last
// knew an object fresh, so a commit asks the store about an object at
// most once per GCGrace/2: a commit of 1,000 scattered keys into 10M
// entries names about 88,000 children. An object a new
// node would reference that is gone fails the write. What the grace
// cannot cover, a collector deleting an old object in the instant a
// commit stores it again (its Stat then its Delete), is closed outside
// this package: gravelerd wraps its Manager with package gcfence.
//
// # Concurrency
//
// A Manager is safe for concurrent use. Iterators it returns are not, and
// they read ranges through the context passed when they were made. Records
// an iterator returns share the cached file's memory and must not be
// modified; Get returns a private copy.
//
// # Errors
//
// Unknown metarange: graveler.ErrMetaRangeNotFound. Missing entry (Get):
// graveler.ErrEntryNotFound. Malformed ID: ErrInvalidID (wraps
// graveler.ErrInvalidArgument). Damaged or mismatching object: ErrCorrupt.
// A missing range or inner node named by a tree, or gone when a new node
// would reference it: an error wrapping ErrBlobNotFound.
// Changes or iterator input out of order, repeated, with an empty key, or
// (WriteMetaRangeByIterator) a tombstone: errors wrapping
// graveler.ErrInvalidArgument. Nothing changed: graveler.ErrNoChanges.
// Merge conflicts under MergeStrategyNone: *graveler.MergeConflictError.
// Blob store failures are returned wrapped.
package committed
