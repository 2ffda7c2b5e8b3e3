// Package committed stores committed entries: it implements
// graveler.CommittedManager (Manager) over a BlobStore, and owns the range
// and metarange file formats, the content-defined range boundaries and the
// in-memory caches of decoded files.
//
// # Objects
//
// A range is an immutable, sorted file of (key, identity, data) records,
// stored at "_graveler/ranges/<id>"; a metarange is the ordered list of a
// tree's ranges, stored at "_graveler/metaranges/<id>". An ID is the
// lowercase hex SHA-256 of the object's bytes, checked on every read. The
// metarange ID "" is the empty tree: it is accepted everywhere, always
// exists, and is never stored. Writing no entries yields "".
//
// # Range file format (version 1)
//
// All integers are little-endian; uvarint is encoding/binary's unsigned
// varint; crc32c is CRC-32 with the Castagnoli polynomial.
//
//	file   = block* index footer
//	block  = record+ crc32c(records)              ; sealed once >= BlockSize (32 KiB)
//	record = uvarint(len) key uvarint(len) identity uvarint(len) data
//	index  = uvarint(nblocks) entry* crc32c(entries and count)
//	entry  = uvarint(len) firstKey uvarint(len) lastKey
//	         uvarint(offset) uvarint(length) uvarint(records)
//	footer = u64 indexOffset, u64 indexLength (without its crc),
//	         u64 records, u32 magic 0x47524e47, u32 version 1,
//	         u32 crc32c(the preceding 32 footer bytes)
//
// An entry's offset and length locate the block's records (its crc follows
// them); blocks are contiguous from offset 0 and the index follows the last
// one. Keys are non-empty and strictly increasing across the file. A reader
// checks every checksum and walks every record once when it loads a file,
// so any damage is reported then as an error wrapping ErrCorrupt; SeekGE
// binary-searches the index by lastKey and scans one block.
//
// A metarange uses the same format with one record per range: key = the
// range's MaxKey, identity = its ID (64 ASCII hex digits), data =
// uvarint(len) MinKey uvarint(Count) uvarint(EstimatedSize).
//
// # Range boundaries
//
// Written streams are cut into ranges by content: after adding a record,
// the range ends if its encoded records reach MaxRangeSize (default 8 MiB),
// or if they reach MinRangeSize (default 64 KiB) and the key's boundary
// hash — 64-bit FNV-1a finished with MurmurHash3's fmix64 — has the bits of
// BoundaryMask (default 0xfff) all zero: about one cut per 4096 keys past
// the minimum, so a range of small entries holds roughly 4k–5k records.
// A boundary depends only on the records since the previous one, so an
// unchanged stretch of keys yields the same ranges, and the same entries
// yield the same metarange ID however they were written, under one Config.
//
// Apply uses this to pass a base range through by reference, without
// reading it, when no change falls in it, the writer stands at a boundary
// and the range itself ended by the boundary rule. Diff (and so Merge)
// skips a pair of ranges with equal IDs without reading either.
//
// # Caches
//
// Decoded metaranges are kept in an LRU bounded by count
// (MetaRangeCacheSize, default 1024) and decoded range files in one bounded
// by their bytes (RangeCacheBytes, default 64 MiB), keyed by namespace and
// ID. Objects never change, so nothing is ever invalidated.
//
// # Verification
//
// ReadMetaRange, RangeExists and VerifyRange check stored objects for a
// consistency checker (package fsck), reading the blob store directly and
// bypassing the caches; RangeSummary.Matches compares a verified range
// with its metarange entry. They are safe for concurrent use.
//
// # Garbage collection
//
// A Manager never deletes an object. A collector (the cleaner's GC)
// deletes the objects no commit references once their modification time
// (BlobStore.List, Stat) is older than its grace period, measured from
// when it began reading the commits. A commit recorded after that must
// therefore reference only objects modified since, and so a metarange is
// written only once every range it references was written or touched
// (BlobStore.Touch) within Config.GCGrace/2: Apply passes ranges through
// from its base without writing them, and a long Apply may have written
// its first ranges long before its metarange. Two rules follow: the
// collector's grace is at least GCGrace, and a commit stores its record
// within GCGrace/2 of writing its metarange. A Manager remembers (up to
// 65,536 objects) when it last knew an object fresh, so a commit asks the
// store about a range at most once per GCGrace/2. A range a new metarange
// would reference that is gone fails the write.
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
// A missing range named by a metarange, or gone when a new metarange
// would reference it: an error wrapping ErrBlobNotFound.
// Changes or iterator input out of order, repeated, with an empty key, or
// (WriteMetaRangeByIterator) a tombstone: errors wrapping
// graveler.ErrInvalidArgument. Nothing changed: graveler.ErrNoChanges.
// Merge conflicts under MergeStrategyNone: *graveler.MergeConflictError.
// Blob store failures are returned wrapped.
package committed
