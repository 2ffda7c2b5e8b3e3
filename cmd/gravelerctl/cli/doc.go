// Package cli is gravelerctl: one cobra command per API operation, human
// output by default and `-o json` (one JSON object per line for lists),
// progress on stderr for dump, restore and bulk put.
//
// Connection flags and their environment variables:
//
//	--server    GRAVELER_SERVER    host:port (default 127.0.0.1:7070)
//	--token     GRAVELER_TOKEN     bearer token
//	--tls                          use TLS with the system roots
//	--tls-ca    GRAVELER_TLS_CA    CA file (implies TLS)
//	--tls-cert  GRAVELER_TLS_CERT  client certificate (mTLS)
//	--tls-key   GRAVELER_TLS_KEY   client key (mTLS)
//	--insecure  GRAVELER_INSECURE  TLS without verifying the server certificate
//	--timeout   GRAVELER_TIMEOUT   per-call timeout (default 30s)
//
// Exit codes, by class of error:
//
//	0 ok
//	1 any other error (INTERNAL, UNKNOWN, local I/O)
//	2 usage error, or INVALID_ARGUMENT from the server
//	3 NOT_FOUND
//	4 ALREADY_EXISTS
//	5 ABORTED (concurrent update, branch head moved: re-read and retry)
//	6 FAILED_PRECONDITION (merge conflict, dirty branch, no changes, ...)
//	7 UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED (retry later)
//	8 UNAUTHENTICATED or PERMISSION_DENIED
//
// Main is safe to call from tests: it holds no global state.
package cli
