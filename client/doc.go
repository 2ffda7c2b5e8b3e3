// Package client is the Go client of the graveler.v1 API for programs.
//
// Dial connects with options for TLS, a bearer token, per-call timeouts and
// keepalive, and returns at the first failed connection attempt with its
// cause (connection refused, TLS handshake error) rather than retrying until
// its context ends. The returned Client embeds the generated
// pb.GravelerServiceClient, so every API method is available on it, and
// adds Close.
//
// Before a unary request is sent, the client checks it against the
// server's size limits (MaxKeyLen, MaxIdentityLen, MaxValueDataLen, the id
// lengths, and the request message size, DefaultMaxRequestSize unless
// WithMaxRequestSize says otherwise) and fails with the code and reason the
// server would have answered, the limit named in the message.
//
// Errors returned by calls are *Error values that match the sentinels of
// this package with errors.Is (errors.Is(err, client.ErrNotFound)) and
// carry the server's google.rpc.ErrorInfo reason and metadata (Reason(err),
// errors.AsType[*client.Error](err)). RESOURCE_EXHAUSTED splits in two:
// ErrMessageTooLarge (a message over a gRPC size limit: retrying cannot
// help) and the rest (e.g. STORE_QUOTA_EXCEEDED, worth retrying later);
// both match ErrResourceExhausted.
//
// Watch follows the change feed (WatchRefs): it reopens a stream that
// breaks from the last resume revision it delivered, so its handler sees
// each message once and in order, and returns ErrRevisionCompacted (a
// *RevisionCompactedError) when the changes to resume from are gone.
//
// A Client is safe for concurrent use and must be closed.
package client
