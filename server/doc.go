// Package server adapts the Graveler service to the graveler.v1 gRPC API.
//
// It owns the translation between API messages and graveler types, resource
// name parsing, paging (opaque page tokens bound to the request's other
// parameters), and the one place where errors become gRPC statuses
// (ToStatus): every error carries a google.rpc.ErrorInfo with an UPPER_SNAKE
// reason and the resource in its metadata. NewGRPCServer adds the
// interceptors (request id, access log as GRPCOptions.AccessLog chooses,
// Prometheus metrics, bearer-token auth, error mapping, panic recovery),
// the standard health service and server reflection; a request message it
// cannot decode is answered INVALID_ARGUMENT (MALFORMED_REQUEST) through
// the same interceptors, not gRPC's own INTERNAL (decode.go).
// GetServerVersion answers with package buildinfo's version.
//
// Revisions: every ref-changing handler runs on a context with a
// kv.Revisions and answers with its revision, that of the operation's
// decisive write (kv.Effect) or, when none was marked (a reset of a key
// or a prefix), of its last write; 0 when it wrote nothing.
//
// WatchRefs serves the change feed (package feed) given in Config.Feed, one
// subscription per stream; a server without one (its store is not etcd)
// answers UNIMPLEMENTED (WATCH_UNSUPPORTED). The feed's errors map to
// OUT_OF_RANGE (REVISION_COMPACTED with compact_revision in the metadata,
// REVISION_IN_FUTURE), RESOURCE_EXHAUSTED (WATCH_TOO_SLOW, with
// resume_revision) and UNAVAILABLE (SERVER_SHUTTING_DOWN).
//
// Ambiguous outcomes (graveler.ErrAmbiguous, kv.ErrAmbiguous: a write may or
// may not have been applied) map to ABORTED with reason OUTCOME_UNKNOWN,
// not UNAVAILABLE: gRPC clients and proxies retry UNAVAILABLE blindly, while
// ABORTED tells the client to re-read and decide, as after a lost
// compare-and-swap. So does a failure after a write's decisive step: a
// commit, merge, revert or cherry-pick that moved its branch and then
// failed to read back the commit it made answers OUTCOME_UNKNOWN, naming
// the commit.
//
// A write the store refuses for space (kv.ErrQuotaExceeded: etcd's NOSPACE
// alarm) maps to RESOURCE_EXHAUSTED with reason STORE_QUOTA_EXCEEDED and a
// message naming the cause and the operator's way out, not UNAVAILABLE,
// although the layers below also mark it graveler.ErrUnavailable: it
// lasts until an operator acts, so blind retries only add load. Reads go
// on working meanwhile (docs/capacity.md).
//
// A Server is safe for concurrent use. RunHealth is long-running work that
// stops when its context ends. Nothing here must be closed beyond the
// *grpc.Server NewGRPCServer returns.
package server
