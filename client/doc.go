// Package client is the Go client of the graveler.v1 API for programs.
//
// Dial connects with options for TLS, a bearer token, per-call timeouts and
// keepalive; the returned Client embeds the generated
// pb.GravelerServiceClient, so every API method is available on it, and
// adds Close. Errors returned by calls are *Error values that match the
// sentinels of this package with errors.Is (errors.Is(err,
// client.ErrNotFound)) and carry the server's google.rpc.ErrorInfo reason
// and metadata (Reason(err), errors.AsType[*client.Error](err)).
//
// A Client is safe for concurrent use and must be closed.
package client
