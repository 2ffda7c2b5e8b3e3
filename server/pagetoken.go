package server

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Paging defaults (AIP-158).
const (
	DefaultPageSize = 100
	MaxPageSize     = 1000
)

// Page token layout, base64url without padding:
//
//	version (1 byte) | request digest (16) | cursor | mac (16)
//
// The request digest binds the token to the method and to every request
// field except page_size and page_token, so a token replayed with other
// parameters is INVALID_ARGUMENT. The mac (HMAC-SHA256 under the server's
// page token key) rejects altered tokens. Replicas must share the key for
// tokens to move between them; the default key is fixed, which detects
// tampering but lets a determined client forge a cursor - harmless, since a
// cursor only says where a listing resumes.
//
// Version 2: Log cursors carry the walk's frontier. A token of another
// version is INVALID_ARGUMENT, so during a rolling upgrade a listing that
// moves between old and new replicas fails cleanly (start it again)
// instead of reading a cursor it does not understand.
const (
	tokenVersion   = 2
	tokenDigestLen = 16
	tokenMACLen    = 16
)

var defaultPageTokenKey = []byte("graveler.v1 page token")

type pager struct {
	key []byte
}

func (p pager) mac(b []byte) []byte {
	h := hmac.New(sha256.New, p.key)
	h.Write(b)
	return h.Sum(nil)[:tokenMACLen]
}

// digest hashes method and req without its paging fields.
func digest(method string, req proto.Message) []byte {
	c := proto.Clone(req)
	m := c.ProtoReflect()
	for _, f := range []protoreflect.Name{"page_size", "page_token"} {
		if fd := m.Descriptor().Fields().ByName(f); fd != nil {
			m.Clear(fd)
		}
	}
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(c)
	h := sha256.New()
	h.Write([]byte(method))
	h.Write([]byte{0})
	h.Write(b)
	return h.Sum(nil)[:tokenDigestLen]
}

func (p pager) encode(method string, req proto.Message, cursor []byte) string {
	b := make([]byte, 0, 1+tokenDigestLen+len(cursor)+tokenMACLen)
	b = append(b, tokenVersion)
	b = append(b, digest(method, req)...)
	b = append(b, cursor...)
	b = append(b, p.mac(b)...)
	return base64.RawURLEncoding.EncodeToString(b)
}

// decode returns the cursor of token; an empty token gives a nil cursor.
func (p pager) decode(method string, req proto.Message, token string) ([]byte, error) {
	if token == "" {
		return nil, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || len(b) < 1+tokenDigestLen+tokenMACLen || b[0] != tokenVersion {
		return nil, fmt.Errorf("%w: malformed", ErrInvalidPageToken)
	}
	body, mac := b[:len(b)-tokenMACLen], b[len(b)-tokenMACLen:]
	if !hmac.Equal(mac, p.mac(body)) {
		return nil, fmt.Errorf("%w: altered or issued by another server", ErrInvalidPageToken)
	}
	if !hmac.Equal(body[1:1+tokenDigestLen], digest(method, req)) {
		return nil, fmt.Errorf("%w: issued for a request with other parameters", ErrInvalidPageToken)
	}
	return body[1+tokenDigestLen:], nil
}

// pageSize applies AIP-158: 0 is the default, above the maximum is capped,
// negative is invalid.
func pageSize(n int32) (int, error) {
	switch {
	case n < 0:
		return 0, fmt.Errorf("%w: %d is negative", ErrInvalidPageSize, n)
	case n == 0:
		return DefaultPageSize, nil
	case n > MaxPageSize:
		return MaxPageSize, nil
	}
	return int(n), nil
}
