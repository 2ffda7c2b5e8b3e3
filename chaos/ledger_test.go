//go:build chaos

package chaos

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"graveler/client"
)

// ledger is the clients' record of what they attempted and what the server
// acknowledged. The checker compares the final state against it.
type ledger struct {
	mu       sync.Mutex
	entries  map[branchRef]map[string]*entryState
	commits  map[branchRef][]*commitAttempt
	branches map[branchRef]*lifecycle
	repos    map[string]*lifecycle
	tags     map[tagRef]*lifecycle

	ops, acked, failed, verified atomic.Int64
	// failures counts failed calls by "operation code" (under mu).
	failures map[string]int
}

type branchRef struct{ repo, branch string }

// entryState: versions increase per key; the last acknowledged one must
// survive, and any later attempted one may have landed (an error does
// not prove a write did not apply).
type entryState struct {
	lastAcked    int
	maxAttempted int
}

type commitAttempt struct {
	message string
	acked   bool
	id      string
	rev     int64 // the revision an acknowledged commit reported
}

// lifecycle of a branch, repository or tag: a create or delete that
// failed may still have applied, so only acknowledged outcomes are
// asserted.
type lifecycle struct {
	created, deleted bool
	deleteAttempted  bool
	// The revisions an acknowledged create or delete reported (0: none).
	createRev, deleteRev int64
}

func newLedger() *ledger {
	return &ledger{
		entries:  map[branchRef]map[string]*entryState{},
		commits:  map[branchRef][]*commitAttempt{},
		branches: map[branchRef]*lifecycle{},
		repos:    map[string]*lifecycle{},
		tags:     map[tagRef]*lifecycle{},
		failures: map[string]int{},
	}
}

// result counts one call of operation op.
func (l *ledger) result(op string, err error) {
	l.ops.Add(1)
	if err == nil {
		l.acked.Add(1)
		return
	}
	l.failed.Add(1)
	l.mu.Lock()
	l.failures[op+" "+code(err).String()]++
	l.mu.Unlock()
}

// failureSummary lists the failure counts, most frequent first.
func (l *ledger) failureSummary() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	type kc struct {
		k string
		n int
	}
	var all []kc
	for k, n := range l.failures {
		all = append(all, kc{k, n})
	}
	slices.SortFunc(all, func(a, b kc) int { return cmp.Or(cmp.Compare(b.n, a.n), cmp.Compare(a.k, b.k)) })
	var b strings.Builder
	for i, e := range all {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s: %d", e.k, e.n)
	}
	return b.String()
}

func (l *ledger) attemptPut(b branchRef, key string, version int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.entries[b]
	if m == nil {
		m = map[string]*entryState{}
		l.entries[b] = m
	}
	s := m[key]
	if s == nil {
		s = &entryState{}
		m[key] = s
	}
	s.maxAttempted = max(s.maxAttempted, version)
}

func (l *ledger) ackPut(b branchRef, key string, version int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.entries[b][key]
	s.lastAcked = max(s.lastAcked, version)
}

func (l *ledger) commit(b branchRef, a *commitAttempt) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.commits[b] = append(l.commits[b], a)
}

func (l *ledger) branch(b branchRef) *lifecycle {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.branches[b]
	if s == nil {
		s = &lifecycle{}
		l.branches[b] = s
	}
	return s
}

func (l *ledger) repo(r string) *lifecycle {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.repos[r]
	if s == nil {
		s = &lifecycle{}
		l.repos[r] = s
	}
	return s
}

func code(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	if e, ok := errors.AsType[*client.Error](err); ok {
		return e.Code
	}
	return status.Code(err)
}
