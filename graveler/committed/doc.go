// Package committed stores committed entries: it implements
// graveler.CommittedManager (Manager) over a BlobStore, and owns the tree
// of ranges and inner nodes, its file formats, its content-defined
// boundaries at every level and the in-memory caches of decoded objects.
//
// # Objects
//
// A tree is a B-tree-like structure of immutable objects. Its leaves are
// ranges: sorted files of (key, identity, data) records. Above them are
// inner nodes: a node of level 1 lists ranges, a node of level n lists
// nodes of level n-1, each child as (max key, id, min key, count of
// entries below it, size of its own records). The root is the one node
// of the top level, and its ID is the tree's MetaRangeID. An ID is the
// lowercase hex SHA-256 of the object's bytes (a node's without its
// locations trailer, below), checked on every read. The metarange ID ""
// is the empty tree: it is accepted everywhere, always exists, and is
// never stored. Writing no entries yields "".
//
// # Packs
//
// A root is stored on its own at "_graveler/metaranges/<id>", where a
// commit's MetaRangeID finds it. Every other object a write makes goes
// into a pack, "_graveler/packs/<128-bit random name in hex>": the
// objects' bytes one after the other, then an index of (ID, kind,
// offset, length) per object. A writer seals its pack at
// Config.PackBytes (8 MiB) and starts another, so a commit of 1,000
// scattered changes into 10M entries stores two blobs, its pack and its
// root, where it would store about 1,800 objects each on its own: one
// blob store write and one file per blob, not per object. A node names
// where each child is stored in a locations trailer that follows the
// node's bytes and is not part of its ID: the same entries make the same
// tree, wherever its objects are. A child with no location is an object
// stored on its own under "_graveler/ranges/<id>" or
// "_graveler/metaranges/<id>", as versions before packs stored every
// object and as Config.Unpacked still does; such trees are read and
// written onto as they are, and a write onto one passes its untouched
// subtrees through where they are.
//
// Because a location is no part of an ID, the same ID may be stored more
// than once: the same entries written again (a revert, a commit tried
// again) make a root of an ID already stored, with other packs. Put
// replaces the stored root, so the root is written only once every pack
// it names is durable (Durability), and a root read earlier, which names
// the packs of the root it replaced, stays good (Garbage collection). A
// root held since before its namespace was emptied (a repository deleted)
// and the same tree written there again names packs that are gone: a
// reader that meets a missing object below a root it holds reads the
// root again from the store (past a CachedBlobStore's copy) and goes on
// from the same place, the shape being that of the ID. A write reads its
// base's root from the store before it writes its own; when the two
// differ, it asks the store about every subtree it passed through rather
// than trust what it remembers as fresh, and a missing one fails the
// write with graveler.ErrUnavailable (try again), the next write going
// by the root as stored.
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
// A node that names a packed child is followed by a locations trailer:
//
//	trailer = body u32 len(body) u32 0x47524c43 ("GRLC")
//	          u32 crc32c(body and its length)
//	body    = uvarint(npacks) pack[16]* loc*   ; one loc per child, in order
//	loc     = uvarint(0)                       ; stored on its own
//	        | uvarint(k) uvarint(offset) uvarint(length)  ; in the k-th pack
//
// The word before a node's last four bytes is its version (1 or 2)
// without a trailer, the trailer's magic with one. A pack is
//
//	pack   = object* index crc32c(index) footer
//	index  = (id[32] u8 kind uvarint(offset) uvarint(length))*  ; kind 0 range, 1 node
//	footer = u64 indexOffset, u64 indexLength, u64 count,
//	         u32 0x4752504b ("GRPK"), u32 version (1),
//	         u32 crc32c(the preceding footer bytes)
//
// The index is for a collector, which keeps a pack while any object in
// it is live; readers reach an object through the location its parent
// gives and check it against its ID like any object.
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
// MinRangeSize (default 1 KiB) and either the key's boundary hash — 64-bit
// FNV-1a finished with MurmurHash3's fmix64 — has the bits of
// BoundaryMask (default 0xf) all zero, or the hash's high 32 bits fall
// below a threshold that rises with the bytes past the minimum, from 0
// to certainty at RangeRamp (default 2 KiB) past it. The mask alone
// counts records (about 16 past the minimum, ranges of 4–5 KiB for
// entries of 200 bytes, geometrically spread); the ramp bounds a range
// in bytes, at most 3 KiB and a record, about 2 KiB on average for
// entries of 100 to 200 bytes. For keys longer than about 100 bytes the
// ramp starts later, once the node holds four parent entries' worth
// (4 × (2 × key length + 48) bytes): a ramp from the minimum would cut
// nodes of long keys after one child, and trees would grow ever taller. A node ends after a child entry by the
// same rule over its own entries with MinNodeSize (1 KiB), MaxNodeSize
// (32 KiB), NodeMask (0xf) and NodeRamp (2 KiB), testing a hash of the
// child's MaxKey mixed with the node's level (so a level's cuts are
// independent of the cuts below it, whose keys all passed the lower
// test). The root is the node being filled at the lowest level with
// nothing above it when the stream ends.
//
// Every cut of an earlier rule (masks alone, at these sizes or at 2 KiB
// with 0x1f and 2 KiB with 0x3f) is a cut of this one wherever the new
// node reached its minimum, so an untouched subtree of an old tree passes
// through a write. Next to a change the write cuts the old nodes anew
// until a new node ends where an old one did (a few nodes a level), and
// the tree it makes mixes both shapes: its ID differs from that of the
// same entries written in bulk now.
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
// moved boundary drags in), O(levels) objects. Packs are stored two at a
// time while the next fills (objects on their own, with Config.Unpacked,
// by Config.WriteParallelism goroutines); a failed write fails the
// Apply, and the root is written only after every other object is. Diff (and so
// Merge) skips a pair of subtrees with equal IDs at equal levels without
// reading either, descending one level at a time where they differ; Get
// and SeekGE descend one path.
//
// # Durability
//
// A tree's ID is handed out only once every object under it is durable,
// since a commit record naming it may be stored at once: a writer takes a
// Syncer (BlobStore.BeginWrites) before its first write and syncs it once
// every pack is written, while it checks the children's times; then it
// writes the root and syncs again (which costs little: the first flushed
// the packs), so the root and what the check touched or relied on are
// durable too. The root waits for the first sync because it may replace
// a root of the same ID that a recorded commit names (Packs): it must
// not name a pack a crash could still lose.
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
// (NodeCacheBytes, default 64 MiB), keyed by namespace, ID and location
// (two copies of a node may place its children in different packs), and
// decoded ranges in one bounded likewise (RangeCacheBytes, default 64
// MiB), keyed by namespace and ID (every copy of a range is the same
// bytes). Stored objects never change; only a root can be replaced by
// another of its ID, so a written root is not kept (it is read from the
// store when first used) and a root held is read again when an object
// below it is missing (Packs). Apply reads the
// ranges its changes fall in, and the inner nodes above them, ahead of
// its walk (16 at a time, from a window of 1,024 changes): the walk only
// looks up what is cached and hands a node that is not to a reader, which
// reads it and goes on down for every change that wants it, so the nodes
// of scattered changes are read side by side. One range or node is read
// once however many readers want it at the same time; a reader that
// waited on another's read which was given up (its context ended) reads
// it itself.
//
// A listing (List) reads ahead: when it enters a range not cached, it
// reads with it the ranges that follow it under the same node and next to
// it in the same pack, in one read, checks each against its ID and caches
// each in memory of its own. A run stops before a range cached or being
// read, and at 256 KiB or an eighth of the range cache (a run that filled
// the cache would evict the range the listing wants next). It starts at
// 2 ranges and doubles up to 64 as the listing goes on, and starts over
// at a seek, so a page of a few entries reads little more than it needs.
// Until the run is read its ranges count as being read, so another reader
// that wants one waits for it. A range in the run that fails its check is
// not cached, and is read again on its own when wanted, which reports the
// error there. Behind a CachedBlobStore the run is one read of the store
// behind it, and each range is kept on disk as the slice a single read
// would have kept. A diff or merge, which skips what both sides share,
// does not read ahead.
//
// # Verification
//
// ReadTreeNode (a root), ReadChildNode (a node where its parent places
// it), ReadMetaRange (every inner node of a tree, returning its ranges),
// RangeExists, VerifyRange, TreeObjects, CheckTreeStored and
// ReadPackIndex check stored objects for a consistency checker (package
// fsck) and a collector, reading the blob store directly and bypassing
// the caches;
// RangeSummary.Matches and TreeNode.Matches compare a verified object with
// the entry its parent holds for it (bounds, count, size). They are safe
// for concurrent use.
//
// # Garbage collection
//
// A Manager never deletes an object. A collector (the cleaner's GC)
// marks every object of every tree a commit references, by ID
// (TreeObjects; a subtree already marked is not walked again), and
// deletes the blobs that hold no marked object once their modification
// time (BlobStore.List, Stat) is older than its grace period, measured
// from when it began reading the commits: an object stored on its own
// when it is not marked, a pack when no object its index lists is (so
// the packs of a root that another of its ID replaced stay while the
// tree is live, for the readers that hold that root). A commit recorded after that must therefore
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
// commit stores it again or touches it (its Stat then its Delete), is
// closed outside this package: gravelerd wraps its Manager with package
// gcfence. Packs take fresh names, so the object a commit stores again is
// a root, or an object stored on its own (Config.Unpacked, or an older
// version); the packs a commit passes objects through from are touched,
// as objects stored on their own are.
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
// A missing range, inner node or pack named by a tree, or gone when a new
// node would reference it: an error wrapping ErrBlobNotFound. A slice of
// a pack past its end: ErrCorrupt (wrapping ErrShortBlob).
// Changes or iterator input out of order, repeated, with an empty key, or
// (WriteMetaRangeByIterator) a tombstone: errors wrapping
// graveler.ErrInvalidArgument. Nothing changed: graveler.ErrNoChanges.
// Merge conflicts under MergeStrategyNone: *graveler.MergeConflictError.
// Blob store failures are returned wrapped.
package committed
