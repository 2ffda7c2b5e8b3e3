// Package staging stores graveler's uncommitted ("staged") entries on a
// kv.Store. Manager implements graveler.StagingManager.
//
// Layout (docs/key-layout.md): each staging token owns one partition,
// staging/<token>, and nothing else writes there. An entry lives at
// key/<entry key> inside it, with the entry key's raw bytes after the
// prefix, so the store's byte order is the entries' order and List needs
// no sorting. Keys are built and parsed only by package keys. Dropping a
// token drops its partition (chunked on etcd); tokens are opaque names
// checked with keys.ValidateName.
//
// Records are stagingpb.Entry protobuf messages with a format version:
// a value (identity and data) or a tombstone (a staged delete), written as
// version 1, or a reset record (version 2), which DropKey and DropByPrefix
// write over an entry instead of deleting it: it reads as nothing staged
// (Get and ReadAt report the key as never staged, List skips it, but it
// counts as a record read), and the key keeps a revision above every
// earlier write of it, so an abandoned attempt of such a write cannot land
// after the reset (see etcdkv's guarded writes). A record of a newer
// format is refused with ErrUnknownFormat; one that does not decode is
// ErrCorruptRecord.
//
// Range tombstones (DeletePrefix, graveler.RangeStager): a token's are all
// in one record, ranges (stagingpb.RangeTombstones), so a Get reads them
// with its entry in one kv request, and one compare-and-swap bounds their
// number (Config.MaxRangeTombstones, then
// graveler.ErrTooManyRangeTombstones). A range tombstone and the token's
// entries are ordered by store revision: an entry written before the
// tombstone is deleted by it, one written after it survives (ranges.go).
// Get, ReadAt and List apply a token's own range tombstones (List returns
// a deleted entry as a tombstone); what they delete in older tokens and in
// the head is the reader's to apply, from ListRanged's prefixes.
//
// Reset ranges (ResetPrefix) share that record and its limit: one
// compare-and-swap discards every entry the token staged under a prefix
// before it (Get and ReadAt report such an entry as never staged, List
// skips it), touching no entry and nothing in older tokens or the head,
// so ListRanged does not report it. It is refused
// (graveler.ErrRangeInScope) while a range tombstone of the token reaches
// into its prefix. A ranges record holding one is written as format
// version 2 (RangesFormatVersion), which a build reading only version 1
// refuses instead of taking it for a delete; without one, it stays
// version 1.
//
// Writes: Set is one kv write; SetAndRead is one kv write that also reads
// other records after it (the writer's fence), one round trip when the store
// is a kv.SetReader. Concurrent SetAndRead calls of one token share kv
// requests within Config.FencedBatchSize and FencedBatchBytes (a request
// the store refuses as too large is sent again write by write); a caller
// whose context ends while its write is queued is answered with that
// error and its write is never sent, and one whose write was sent waits
// for the request's outcome (see fencedBatcher); a shared request's
// revision is noted in every one of its callers' kv.Revisions, as their
// own write's. SetBatch validates every record first, then
// writes them with bounded parallelism; it is not atomic, and when the
// token is retired part way its *graveler.PartlyStagedError names the
// records not written (the others were, before the retirement).
// DropByPrefix scans and writes reset records in chunks, holding one chunk
// of keys at a time (ResetPrefix discards the same entries in one write).
// Sealed reads a retired token's seal marker so that a writer whose fence
// ran after the retirement can tell whether the sealing update came after
// its write.
//
// Reads: List is lazy and paged. It reads nothing until the first Next or
// SeekGE (then the ranges record, then entries); its first page is small (Config.ListFirstPageSize) and pages
// double up to Config.ScanPageSize, so reading a few entries of a token
// with millions costs one small read, and a full walk streams with memory
// bounded by one page. Each page is a fresh kv scan: entries written during
// a walk may or may not be seen, entries untouched during it are seen
// exactly once, in order.
//
// Concurrency: a Manager is safe for concurrent use by many goroutines and
// many processes sharing one store; besides its configuration it holds
// only the fenced writes queued behind a request in flight (under a mutex
// never held across a kv call), and starts a goroutine only to send a
// queued batch. It needs no Close; the caller owns and closes the store. The iterators List returns are not safe for concurrent
// use and must be closed.
//
// Errors: graveler.ErrEntryNotFound (Get of a key with nothing staged);
// graveler.ErrInvalidKey, graveler.ErrInvalidValue and
// graveler.ErrValueTooLarge (all graveler.ErrInvalidArgument) and
// ErrInvalidStagingToken for bad input; ErrUnknownFormat and
// ErrCorruptRecord (graveler.ErrFailedPrecondition) for stored records it
// cannot read. Store errors are wrapped with graveler.ErrAmbiguous
// (kv.ErrAmbiguous: the write may have been applied), graveler.ErrUnavailable
// (kv.ErrUnavailable, kv.ErrQuotaExceeded) or graveler.ErrInvalidArgument
// (kv size limits). Context errors pass through, wrapped. Messages start
// with "staging: " and name the token and key.
package staging
