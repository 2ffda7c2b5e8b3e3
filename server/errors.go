package server

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"graveler/feed"
	"graveler/graveler"
	"graveler/graveler/gcfence"
	"graveler/kv"
)

// ErrorDomain is the ErrorInfo domain of every error the server returns.
const ErrorDomain = "graveler.v1"

// Errors the server itself detects. Each wraps a graveler category so that
// ToStatus maps it like any other.
var (
	ErrInvalidName      = fmt.Errorf("server: resource name: %w", graveler.ErrInvalidArgument)
	ErrInvalidPageSize  = fmt.Errorf("server: page size: %w", graveler.ErrInvalidArgument)
	ErrInvalidPageToken = fmt.Errorf("server: %w", graveler.ErrInvalidPageToken)
	ErrMissingField     = fmt.Errorf("server: missing field: %w", graveler.ErrInvalidArgument)
	// ErrInvalidField: a field holds a value the API does not define (an
	// enum value out of range).
	ErrInvalidField  = fmt.Errorf("server: invalid field: %w", graveler.ErrInvalidArgument)
	ErrBatchTooLarge = fmt.Errorf("server: batch too large: %w", graveler.ErrInvalidArgument)
	// ErrMalformedRequest: a request message cannot be decoded (a string
	// field that is not UTF-8, bytes that are no protobuf message).
	ErrMalformedRequest = fmt.Errorf("server: malformed request: %w", graveler.ErrInvalidArgument)
	// ErrUnauthenticated: no bearer token, or one the server does not know.
	ErrUnauthenticated = errors.New("server: unauthenticated")
)

// reasons maps specific errors to ErrorInfo reasons; the first match wins,
// so more specific errors come before the ones they wrap.
var reasons = []struct {
	err    error
	reason string
}{
	// First: an unknown outcome may carry the error of the read that
	// could not settle it (a repository deleted meanwhile, say), and what
	// that read found does not describe the write.
	{graveler.ErrAmbiguous, "OUTCOME_UNKNOWN"},
	{kv.ErrAmbiguous, "OUTCOME_UNKNOWN"},
	{graveler.ErrRepositoryNotFound, "REPOSITORY_NOT_FOUND"},
	{graveler.ErrRepositoryExists, "REPOSITORY_ALREADY_EXISTS"},
	{graveler.ErrRepositoryDeleting, "REPOSITORY_DELETING"},
	{graveler.ErrNamespaceInUse, "NAMESPACE_IN_USE"},
	{graveler.ErrNamespaceUnwritable, "NAMESPACE_UNWRITABLE"},
	{graveler.ErrBranchNotFound, "BRANCH_NOT_FOUND"},
	{graveler.ErrBranchExists, "BRANCH_ALREADY_EXISTS"},
	{graveler.ErrTagNotFound, "TAG_NOT_FOUND"},
	{graveler.ErrTagExists, "TAG_ALREADY_EXISTS"},
	{graveler.ErrCommitNotFound, "COMMIT_NOT_FOUND"},
	{graveler.ErrRefNotFound, "REF_NOT_FOUND"},
	{graveler.ErrRefAmbiguous, "REF_AMBIGUOUS"},
	{graveler.ErrEntryNotFound, "ENTRY_NOT_FOUND"},
	{graveler.ErrEntryExists, "ENTRY_ALREADY_EXISTS"},
	{graveler.ErrMetaRangeNotFound, "METARANGE_NOT_FOUND"},
	{graveler.ErrValueTooLarge, "VALUE_TOO_LARGE"},
	{graveler.ErrInvalidValue, "INVALID_VALUE"},
	{graveler.ErrInvalidRef, "INVALID_REF"},
	{graveler.ErrInvalidRepositoryID, "INVALID_REPOSITORY_ID"},
	{graveler.ErrInvalidBranchID, "INVALID_BRANCH_ID"},
	{graveler.ErrInvalidTagID, "INVALID_TAG_ID"},
	{graveler.ErrInvalidCommitID, "INVALID_COMMIT_ID"},
	{graveler.ErrInvalidKey, "INVALID_KEY"},
	{graveler.ErrInvalidStorageNamespace, "INVALID_STORAGE_NAMESPACE"},
	{graveler.ErrInvalidPageToken, "INVALID_PAGE_TOKEN"},
	{ErrInvalidName, "INVALID_RESOURCE_NAME"},
	{ErrInvalidPageSize, "INVALID_PAGE_SIZE"},
	{ErrMissingField, "MISSING_FIELD"},
	{ErrInvalidField, "INVALID_FIELD"},
	{ErrBatchTooLarge, "BATCH_TOO_LARGE"},
	{ErrMalformedRequest, "MALFORMED_REQUEST"},
	{graveler.ErrDeleteDefaultBranch, "DELETE_DEFAULT_BRANCH"},
	{graveler.ErrNoChanges, "NO_CHANGES"},
	{graveler.ErrDirtyBranch, "DIRTY_BRANCH"},
	{graveler.ErrNotBareRepository, "NOT_BARE_REPOSITORY"},
	{graveler.ErrNoMergeBase, "NO_MERGE_BASE"},
	{graveler.ErrAmbiguousMergeBase, "AMBIGUOUS_MERGE_BASE"},
	{graveler.ErrRevertMergeNoParent, "REVERT_MERGE_NO_PARENT"},
	{graveler.ErrInvalidParentNumber, "INVALID_PARENT_NUMBER"},
	{graveler.ErrMergeConflict, "MERGE_CONFLICT"},
	{graveler.ErrBranchHeadMoved, "BRANCH_HEAD_MOVED"},
	{graveler.ErrTooManyRetries, "TOO_MANY_RETRIES"},
	{graveler.ErrTooManyRangeTombstones, "TOO_MANY_RANGE_TOMBSTONES"},
	{kv.ErrPredicateFailed, "CONCURRENT_UPDATE"},
	// Before STORE_UNAVAILABLE: etcd answered; a collection deleted an
	// object the commit had just stored again, and a retry stores it.
	{gcfence.ErrSwept, "CONCURRENT_GC_SWEEP"},
	// Before STORE_UNAVAILABLE: the layers above kv add the category
	// graveler.ErrUnavailable to a refused write, and retrying a write
	// refused for space is useless until an operator acts.
	{kv.ErrQuotaExceeded, "STORE_QUOTA_EXCEEDED"},
	{graveler.ErrUnavailable, "STORE_UNAVAILABLE"},
	{kv.ErrUnavailable, "STORE_UNAVAILABLE"},
	{kv.ErrKeyTooLarge, "KEY_TOO_LARGE"},
	{kv.ErrValueTooLarge, "VALUE_TOO_LARGE"},
	{ErrUnauthenticated, "UNAUTHENTICATED"},
	{ErrWatchUnsupported, "WATCH_UNSUPPORTED"},
	{feed.ErrCompacted, "REVISION_COMPACTED"},
	{feed.ErrFutureRevision, "REVISION_IN_FUTURE"},
	{feed.ErrTooSlow, "WATCH_TOO_SLOW"},
	{feed.ErrClosed, "SERVER_SHUTTING_DOWN"},
	// Category fallbacks.
	{graveler.ErrNotFound, "NOT_FOUND"},
	{graveler.ErrAlreadyExists, "ALREADY_EXISTS"},
	{graveler.ErrInvalidArgument, "INVALID_ARGUMENT"},
	{graveler.ErrConflict, "CONFLICT"},
	{graveler.ErrFailedPrecondition, "FAILED_PRECONDITION"},
	{context.DeadlineExceeded, "DEADLINE_EXCEEDED"},
	{context.Canceled, "CANCELED"},
}

// code is the one switch from error categories to status codes.
func code(err error) codes.Code {
	switch {
	case errors.Is(err, ErrUnauthenticated):
		return codes.Unauthenticated
	case errors.Is(err, ErrWatchUnsupported):
		return codes.Unimplemented
	case errors.Is(err, feed.ErrCompacted), errors.Is(err, feed.ErrFutureRevision):
		return codes.OutOfRange
	case errors.Is(err, feed.ErrTooSlow):
		return codes.ResourceExhausted
	case errors.Is(err, feed.ErrClosed):
		return codes.Unavailable
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	// Before the categories of what an unknown outcome may wrap: a write
	// followed by a failed read-back is ABORTED (re-read, then decide),
	// never NOT_FOUND or INVALID_ARGUMENT ("do not retry"), which would
	// contradict the message and hide that the write may have applied.
	case errors.Is(err, graveler.ErrAmbiguous), errors.Is(err, kv.ErrAmbiguous):
		return codes.Aborted
	case errors.Is(err, graveler.ErrNotFound):
		return codes.NotFound
	case errors.Is(err, graveler.ErrAlreadyExists):
		return codes.AlreadyExists
	case errors.Is(err, graveler.ErrInvalidArgument),
		errors.Is(err, kv.ErrKeyTooLarge), errors.Is(err, kv.ErrValueTooLarge):
		return codes.InvalidArgument
	case errors.Is(err, graveler.ErrConflict), errors.Is(err, kv.ErrPredicateFailed):
		return codes.Aborted
	case errors.Is(err, graveler.ErrFailedPrecondition):
		return codes.FailedPrecondition
	case errors.Is(err, kv.ErrQuotaExceeded), errors.Is(err, graveler.ErrResourceExhausted):
		return codes.ResourceExhausted
	case errors.Is(err, graveler.ErrUnavailable), errors.Is(err, kv.ErrUnavailable):
		return codes.Unavailable
	}
	return codes.Internal
}

// resourceError attaches ErrorInfo metadata (the resource an operation
// addressed) to an error on its way to ToStatus.
type resourceError struct {
	err  error
	meta map[string]string
}

func (e *resourceError) Error() string { return e.err.Error() }
func (e *resourceError) Unwrap() error { return e.err }

// withResource names the resource err concerns, as alternating key, value
// pairs ("repository", "repositories/r", ...), values as the request gave
// them (putMeta bounds them). Nil stays nil.
func withResource(err error, kvs ...string) error {
	if err == nil {
		return nil
	}
	meta := make(map[string]string, len(kvs)/2)
	for i := 0; i+1 < len(kvs); i += 2 {
		if kvs[i+1] != "" {
			putMeta(meta, kvs[i], kvs[i+1])
		}
	}
	return &resourceError{err: err, meta: meta}
}

// maxMetaValue bounds an ErrorInfo metadata value taken from a request.
// Every valid key, name and ref is shorter, so only an invalid value is
// cut; an uncut one (megabytes) made a status too large for the client's
// trailers, which tore down its connection and every call on it.
const maxMetaValue = graveler.MaxKeyLen

// putMeta sets the ErrorInfo metadata k to v, a value from the request,
// in the form docs/operations.md ("Errors a client sees") documents: a
// value over maxMetaValue bytes is cut to that (at a character boundary)
// and its full length set under k+"Length"; a value that is not valid
// UTF-8 (keys are any bytes) is set base64-encoded (standard, padded)
// under k+"Base64" instead of k, since metadata values are proto strings,
// and one that is not UTF-8 cost the status its whole ErrorInfo.
func putMeta(meta map[string]string, k, v string) {
	if len(v) > maxMetaValue {
		meta[k+"Length"] = strconv.Itoa(len(v))
		n := maxMetaValue
		for i := 1; i < utf8.UTFMax && !utf8.RuneStart(v[n]); i++ {
			n--
		}
		v = v[:n]
	}
	if !utf8.ValidString(v) {
		meta[k+"Base64"] = base64.StdEncoding.EncodeToString([]byte(v))
		return
	}
	meta[k] = v
}

// metadataError is an error that names what its ErrorInfo metadata must
// carry (the feed's: compact_revision, resume_revision).
type metadataError interface {
	error
	ErrorMetadata() map[string]string
}

// maxStatusMessage bounds a status message.
const maxStatusMessage = 4 << 10

// maxConflictKeys bounds the keys MERGE_CONFLICT lists in its metadata.
const maxConflictKeys = 20

// ToStatus is the one place where errors become gRPC statuses. requestID
// names the request in the ErrorInfo and, for INTERNAL errors, in the
// message, which then hides the error itself (the caller logs it).
// A nil error gives nil; an error that already is a status passes through.
func ToStatus(err error, requestID string) *status.Status {
	if err == nil {
		return nil
	}
	c := code(err)
	if c == codes.Internal {
		if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown {
			return st
		}
	}
	meta := map[string]string{}
	if re, ok := errors.AsType[*resourceError](err); ok {
		for k, v := range re.meta {
			meta[k] = v
		}
	}
	reason := "INTERNAL"
	for _, r := range reasons {
		if errors.Is(err, r.err) {
			reason = r.reason
			break
		}
	}
	if me, ok := errors.AsType[metadataError](err); ok {
		for k, v := range me.ErrorMetadata() {
			putMeta(meta, k, v)
		}
	}
	if mc, ok := errors.AsType[*graveler.MergeConflictError](err); ok {
		name, keys := conflictingKeys(mc.Keys[:min(len(mc.Keys), maxConflictKeys)])
		meta[name] = keys
		meta["conflictCount"] = strconv.Itoa(mc.Total)
	}
	if requestID != "" {
		meta["requestId"] = requestID
	}
	msg := err.Error()
	if len(msg) > maxStatusMessage {
		// Every value from a request is cut (graveler.Echo) before it is
		// in a message; this bounds the few that are not, should one slip.
		msg = msg[:maxStatusMessage] + "... (" + strconv.Itoa(len(msg)) + " bytes)"
	}
	// The status's message is a proto string too: not UTF-8, it would cost
	// the ErrorInfo.
	msg = strings.ToValidUTF8(msg, "\uFFFD")
	if c == codes.Internal {
		msg = "internal error (request id " + requestID + ")"
		meta = map[string]string{"requestId": requestID}
	}
	st := status.New(c, msg)
	if d, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain, Metadata: meta}); derr == nil {
		return d
	}
	// Some metadata could not be encoded (none that putMeta set): the
	// reason, which programs switch on, still goes.
	if d, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain,
		Metadata: map[string]string{"requestId": strings.ToValidUTF8(requestID, "\uFFFD")}}); derr == nil {
		return d
	}
	return st
}

// maxConflictJSON bounds the conflictingKeys metadata value: 20 keys of
// 1 KiB of control bytes would be 120 KiB of JSON.
const maxConflictJSON = 8 << 10

// conflictingKeys is the MERGE_CONFLICT metadata listing keys: a JSON
// array of the keys under "conflictingKeys", or, when one of them is not
// UTF-8 (which JSON strings and proto strings must be), of their base64
// under "conflictingKeysBase64", as putMeta does; the last keys are left
// out while the array is over maxConflictJSON.
func conflictingKeys(keys []graveler.Key) (string, string) {
	name, enc := "conflictingKeys", func(k graveler.Key) string { return string(k) }
	if slices.ContainsFunc(keys, func(k graveler.Key) bool { return !utf8.Valid(k) }) {
		name, enc = "conflictingKeysBase64", func(k graveler.Key) string { return base64.StdEncoding.EncodeToString(k) }
	}
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = enc(k)
	}
	for {
		b, _ := json.Marshal(out)
		if len(b) <= maxConflictJSON || len(out) <= 1 {
			return name, string(b)
		}
		out = out[:len(out)-1]
	}
}
