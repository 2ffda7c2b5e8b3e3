package server

import (
	"bufio"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Tokens is a set of bearer tokens, each with a label for the logs.
// Safe for concurrent use (read-only after loading).
type Tokens struct {
	// by digest, so a lookup does not compare secrets byte by byte.
	labels map[[32]byte]string
}

// LoadTokens reads a tokens file: one token per line, optionally followed by
// whitespace and a label (who holds it); blank lines and lines starting
// with '#' are ignored. An empty file is an error: it would lock everyone out.
func LoadTokens(path string) (*Tokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("server: tokens file: %w", err)
	}
	defer f.Close()
	t := &Tokens{labels: map[[32]byte]string{}}
	sc := bufio.NewScanner(f)
	line := 0
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		tok, label, _ := strings.Cut(s, " ")
		label = strings.TrimSpace(label)
		if label == "" {
			label = fmt.Sprintf("token@line%d", line)
		}
		t.labels[sha256.Sum256([]byte(tok))] = label
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("server: tokens file %s: %w", path, err)
	}
	if len(t.labels) == 0 {
		// Say what the file must hold wherever it comes from; the usual
		// cause on Kubernetes is the manifests' placeholder Secret left
		// unfilled, whose key is the file's name, so name it as a hint.
		return nil, fmt.Errorf("server: tokens file %s holds no token (it is empty or has only blank and # lines): "+
			"it must hold one token per line, \"<token> <label>\" (the label is optional); "+
			"if it is mounted from a Kubernetes Secret, fill the Secret's key %q (with deploy/k8s: the Secret graveler-tokens, which overlays/s3 makes from its secrets/tokens file)",
			path, filepath.Base(path))
	}
	return t, nil
}

// NewTokens builds a token set from token -> label.
func NewTokens(tokens map[string]string) *Tokens {
	t := &Tokens{labels: map[[32]byte]string{}}
	for tok, label := range tokens {
		t.labels[sha256.Sum256([]byte(tok))] = label
	}
	return t
}

// Lookup returns the label of token.
func (t *Tokens) Lookup(token string) (string, bool) {
	l, ok := t.labels[sha256.Sum256([]byte(token))]
	return l, ok
}

type principalKey struct{}

// withPrincipal records the label of the token a request authenticated
// with ("" when the server requires none).
func withPrincipal(ctx context.Context, label string) context.Context {
	if label == "" {
		return ctx
	}
	return context.WithValue(ctx, principalKey{}, label)
}

// Principal returns the label of the bearer token the request of ctx
// authenticated with, or "" when the server requires no token. It is the
// committer of a commit whose request names none.
func Principal(ctx context.Context) string {
	p, _ := ctx.Value(principalKey{}).(string)
	return p
}
