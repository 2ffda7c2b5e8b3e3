// Package cli is gravelerctl: one cobra command per API operation, human
// output by default and `-o json` (one JSON object per line for lists),
// progress on stderr for dump, restore and bulk put.
//
// Connection flags and their environment variables:
//
//	--server           GRAVELER_SERVER            host:port (default 127.0.0.1:7070), unix:PATH or dns:///host:port
//	--token            GRAVELER_TOKEN             bearer token
//	--tls                                         use TLS with the system roots
//	--tls-ca           GRAVELER_TLS_CA            CA file (implies TLS)
//	--tls-cert         GRAVELER_TLS_CERT          client certificate (mTLS), with --tls-key
//	--tls-key          GRAVELER_TLS_KEY           client key (mTLS), with --tls-cert
//	--insecure         GRAVELER_INSECURE          TLS without verifying the server certificate
//	--timeout          GRAVELER_TIMEOUT           per-call timeout (default 30s)
//	--connect-timeout  GRAVELER_CONNECT_TIMEOUT   bound on connecting (default 5s)
//	--max-request-size GRAVELER_MAX_REQUEST_SIZE  the server's request size limit (default 4 MiB)
//
// A refused connection or a failed TLS handshake fails at once with its
// cause; --connect-timeout only bounds a server that does not answer.
//
// Human output prints a key as it is when it is printable UTF-8 and quoted
// Go-style otherwise (control characters, invalid UTF-8, a leading quote),
// so one key is one line. `get` writes the value's data byte for byte.
//
// `-o json` prints protobuf's JSON mapping with the proto field names
// (snake_case; int64 fields such as revision are strings), in every command
// and in dump files. Each bytes field F (key, identity, data) appears as
// F_base64, the exact bytes, and also as F, a string, when the bytes are
// valid UTF-8. A read prints the resource; a mutation prints the API's
// response: the resource it made or moved and the revision at which the
// change took effect (merge also fast_forward). put, rm and put-bulk, whose
// responses are empty, print the branch and key (put-bulk: entries, the
// input line of the last acknowledged entry, and complete, also when it
// stops early); delete-prefix prints the branch and prefix (an empty
// prefix, every entry of the branch, needs --all).
//
// Before a request is sent the client checks the server's limits (key 1
// KiB, identity 256 bytes, data 512 KiB, repository id 63 bytes, branch and
// tag ids 256 bytes, request message --max-request-size) and fails with
// the limit named; put-bulk sizes its batches under --max-request-size.
//
// Exit codes, by class of error:
//
//	0 ok
//	1 any other error (INTERNAL, UNKNOWN, DATA_LOSS, UNIMPLEMENTED,
//	  CANCELED, local I/O such as a file it cannot open or read)
//	2 usage error: the command line is wrong (an unknown or missing command
//	  or subcommand, arguments, flags or the GRAVELER_* variables that
//	  stand for them, a commit without -m, an empty delete-prefix without
//	  --all)
//	3 NOT_FOUND
//	4 ALREADY_EXISTS
//	5 ABORTED (concurrent update, branch head moved: re-read and retry)
//	6 FAILED_PRECONDITION (merge conflict, dirty branch, no changes, ...)
//	7 UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED other than message size (retry later)
//	8 UNAUTHENTICATED or PERMISSION_DENIED
//	9 invalid input: INVALID_ARGUMENT or OUT_OF_RANGE from the server, a limit
//	  the client checks, a request over a gRPC message size limit, or a
//	  restore or put-bulk file with a line that does not decode or is over
//	  4 MiB (the error names the file and the line)
//
// RESOURCE_EXHAUSTED has two meanings. gRPC answers it, with no ErrorInfo,
// to a message over its size limit, a request or a response (the hint on
// stderr says which): sending it again fails the same way, so it is
// invalid input (9). Everything else that answers it (the
// server's STORE_QUOTA_EXCEEDED, a slow WatchRefs reader, any future rate
// limit) clears with time or an operator: retry later (7).
//
// Main is safe to call from tests: it holds no global state.
package cli
