package server

import (
	"bufio"
	"crypto/sha256"
	"fmt"
	"os"
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
		return nil, fmt.Errorf("server: tokens file %s holds no token", path)
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
