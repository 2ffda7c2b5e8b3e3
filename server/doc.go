// Package server adapts the Graveler service to the graveler.v1 gRPC API.
//
// It owns the translation between API messages and graveler types, resource
// name parsing, paging (opaque page tokens bound to the request's other
// parameters), and the one place where errors become gRPC statuses
// (ToStatus): every error carries a google.rpc.ErrorInfo with an UPPER_SNAKE
// reason and the resource in its metadata. NewGRPCServer adds the
// interceptors (request id, per-request log line, Prometheus metrics,
// bearer-token auth, error mapping, panic recovery), the standard health
// service and server reflection.
//
// Ambiguous outcomes (graveler.ErrAmbiguous, kv.ErrAmbiguous: a write may or
// may not have been applied) map to ABORTED with reason OUTCOME_UNKNOWN,
// not UNAVAILABLE: gRPC clients and proxies retry UNAVAILABLE blindly, while
// ABORTED tells the client to re-read and decide, as after a lost
// compare-and-swap.
//
// A Server is safe for concurrent use. RunHealth is long-running work that
// stops when its context ends. Nothing here must be closed beyond the
// *grpc.Server NewGRPCServer returns.
package server
