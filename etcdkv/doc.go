// Package etcdkv implements kv.Store on etcd (go.etcd.io/etcd/client/v3).
//
// Mapping (DESIGN.md, "kv.Store"): a partition is the key prefix
// <root>/<partition>/ under a configurable root (default /graveler); an
// entry's key follows raw, so etcd's byte order is the entries' order. The
// predicate of a value is its ModRevision; SetIf is one Txn comparing
// ModRevision (or CreateRevision == 0 for kv.Absent).
//
// Scan reads a whole partition at one pinned revision through etcd 3.7's
// RangeStream, which reads in chunks without counting the rest of the range
// (a limited unary Range counts every remaining key, which makes paging a
// large partition quadratic). If the pinned revision is compacted mid-scan,
// the scan resumes after the last key returned, at the current revision. On
// servers without RangeStream it falls back to paged Ranges.
//
// Ambiguous writes: when a write fails after it may have reached etcd (a
// timeout, a lost leader, a broken connection), the store settles the
// outcome before answering. SetIf re-sends the same guarded Txn with an Else
// branch that reads the key: success means the first attempt had not
// applied; a failed compare that finds our exact value at a newer revision
// means it had (values written by graveler carry unique content such as
// fresh staging tokens, so an identical value from another writer leaves the
// store in the state the caller asked for). Set and Delete are idempotent and
// are simply re-sent. Only when settling keeps failing does the caller see
// kv.ErrAmbiguous.
//
// Concurrency: a Store is safe for concurrent use. Close closes the etcd
// client if the Store dialed it (New), not if it was given one
// (NewFromClient).
//
// Errors: the kv sentinels. etcd's NOSPACE alarm is kv.ErrQuotaExceeded;
// oversized requests are rejected before sending with kv.ErrKeyTooLarge or
// kv.ErrValueTooLarge naming the size and the limit; an unreachable cluster
// on a read is kv.ErrUnavailable.
package etcdkv
