// Package etcdkv implements kv.Store on etcd (go.etcd.io/etcd/client/v3).
//
// Mapping (docs/architecture.md, "kv.Store"): a partition is the key prefix
// <root>/<element>/ under a configurable root (default /graveler), where
// the element is the partition's name with every '/' written as ':'
// (PartitionElement): no partition name holds a ':', and an element holds
// no '/', so the first '/' after the root ends the partition and no
// partition's keys fall under another's prefix, whatever the names. An
// entry's key follows raw, so etcd's byte order is the entries' order.
// RawKey, RawPrefix and ParseRawKey convert for tools that read etcd
// directly; ListPartitions and CountPartition serve the cleaner's sweep.
// The predicate of a value is its ModRevision; SetIf and DeleteIf are one
// Txn comparing ModRevision (or CreateRevision == 0 for kv.Absent).
//
// Format note (key format 2): format 1 wrote <root>/<partition>/<key>
// with the partition's '/' kept, so partitions "x" and "x/y" could share
// keys. Keys written in format 1 under partitions whose names hold a '/'
// (repo/..., staging/...) are not read, migrated or dropped by this
// version: start it on an empty root prefix.
//
// Scan reads a whole partition at one pinned revision through etcd 3.7's
// RangeStream, which reads in chunks without counting the rest of the range
// (a limited unary Range counts every remaining key, which makes paging a
// large partition quadratic). If the pinned revision is compacted mid-scan,
// the scan resumes after the last key returned, at the current revision. On
// servers without RangeStream it falls back to paged Ranges, each bounded to
// a window of the key space estimated to hold about 1.5 pages, so that
// etcd's count covers the window rather than the rest of the partition
// (RangeRequest has no field that skips the count). Pages count keys, so
// a page of large values can outgrow the largest response the client
// accepts; such a page is read again in halves, and the scan keeps the
// smaller page.
//
// A stopped member: each attempt of a request is bounded by
// Config.RequestTimeout (each chunk of a scan, the first with the
// stream's opening, which the client would otherwise hold until a member
// accepts a connection; each page or chunk of a drop). A read that runs
// out is sent again (three attempts at most) and the balancer picks
// another member for it; a write that runs out is
// settled as ambiguous (below). An attempt that runs out also has every
// member probed with a linearizable read over a connection of its own,
// bounded by a quarter of the request timeout (at most 1s); the attempt's
// retry waits for that decision. Members that do not answer are taken out
// of the client's endpoints and put back once such a read through them
// succeeds (a leader resumed after a stop answers status at once but
// serves no read for seconds), so later requests stop meeting them at
// all. Keepalive (Config.DialKeepAliveTime) closes the silent connection
// later.
//
// Abandoned attempts: an attempt the store gave up on is not withdrawn.
// A stopped member keeps it and, when it resumes, forwards it to the
// leader, seconds after the caller was answered. So Set, Delete and
// SetAndRead, though unconditional, send every attempt as a Txn guarded
// by the highest revision the store had seen when sending it (L): it
// applies only if none of the keys it writes was written after L. A
// write that applies after an attempt was sent, the caller's own re-send
// or anyone's, ends that attempt for good, so an acknowledged write is
// never overwritten by an older attempt landing late. A guard that fails
// only means a key changed after L (or L was older than the key's last
// write, made by another process): the attempt is sent again at once
// with a fresher bound. Ten failures in a row (keys written without pause
// by others) give ErrContended, a kv.ErrUnavailable: nothing applied.
// The guard cannot see deletions, since etcd compares a missing key as
// revision 0, nor protect a write whose caller gave up while its key
// stayed put. So every write attempt also carries the store's write
// fence (fence.go): a compare on a key of the store's own,
// <root>/!fence/<id>, on a lease, which the store moves whenever an
// attempt's outcome is unknown, before it re-sends, settles or answers.
// An attempt held by a stopped member then applies before that move or
// never: a deleted key is not re-created by an attempt abandoned before
// the delete, and a write whose caller gave up (answered ambiguous) does
// not take effect afterwards. A dead process's attempts are fenced when
// its lease expires (30s). The fence costs one compare per write and
// nothing else until an answer is lost. What it cannot cover: a move that
// fails (etcd unreachable) is retried before the store's next write,
// which is not sent until it succeeds; and while etcd is out of space the
// fence key may be impossible to create, so a delete (the only write
// etcd then accepts) whose answer is lost is not fenced; partition drops
// are plain range deletes of partitions nobody writes again, not fenced.
//
// Ambiguous writes: when a write fails after it may have reached etcd (a
// timeout, a lost leader, a broken connection), the store settles the
// outcome before answering. Set, Delete and SetAndRead are re-sent, each
// attempt guarded as above with a fresh bound: whichever earlier attempts
// applied, the attempt that succeeds leaves the keys as the caller asked,
// and SetAndRead's reads come from it. SetIf and DeleteIf
// re-send the same guarded Txn with an Else branch that reads the key:
// success means this attempt applied. A failed guard means the key moved
// on, through the first attempt or another writer, and the key's history
// (an etcd watch from the guarded version) decides: a SetIf applied iff
// the first change after its predicate put its value (for kv.Absent: a
// creation of the key with its value after a revision the store had seen
// before sending); a DeleteIf counts as applied iff a deletion ended the
// version it named. Values therefore identify a SetIf's attempt (see
// kv.Store.SetIf). When that history is compacted, or settling keeps
// failing, the caller sees kv.ErrAmbiguous, never a guess.
//
// Revisions (kv.Revisions): every write that succeeds notes the etcd
// revision of the transaction that applied it, a key's ModRevision after
// a put, the deletion's revision after a delete (for a partition drop,
// that of its last chunk). A write settled as applied from the key's
// history notes the revision of the change found there: for a DeleteIf,
// that of the deletion that ended its version, whoever made it. A delete
// that found nothing to delete notes the revision it read at.
//
// Concurrency: a Store is safe for concurrent use. Close closes the etcd
// client if the Store dialed it (New), not if it was given one
// (NewFromClient); only a Store that dialed several endpoints takes
// members out of the rotation, from one goroutine at a time that Close
// stops.
//
// Errors: the kv sentinels. etcd's NOSPACE alarm is kv.ErrQuotaExceeded,
// its message carrying NoSpaceHint (the cause and the operator's way out).
// Under that alarm etcd refuses every put (and every Txn that puts) but
// still serves reads and deletes: Get, Scan, Delete, DeleteIf and
// DropPartition keep working, so space can be freed. A NOSPACE answer is
// not always a refusal: etcd applies the write that takes its database
// past the quota and answers it NOSPACE all the same. So the key decides,
// as when settling (without re-sending, which would be refused): a write
// whose guard still holds, or whose key has not changed since it was
// sent, was refused (kv.ErrQuotaExceeded); a SetIf the key's history
// shows applied succeeds; a Set or SetAndRead whose value the key took
// since is kv.ErrAmbiguous (wrapping kv.ErrQuotaExceeded too);
// oversized requests are rejected before sending with kv.ErrKeyTooLarge or
// kv.ErrValueTooLarge naming the size and the limit; an unreachable cluster
// on a read (a scan, a partition listing or drop included), or a read
// whose every attempt ran out, is kv.ErrUnavailable;
// a DeadlineExceeded from etcd when the caller's deadline has come (or is
// a few milliseconds away: etcd, given the deadline, can report it before
// the caller's context does) is context.DeadlineExceeded instead.
// A write whose context had ended before it was sent returns the
// context's error and was not applied.
package etcdkv
