package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/spf13/cobra"

	pb "graveler/api/graveler/v1"
	"graveler/client"
)

func (a *app) watchCmd() *cobra.Command {
	var since int64
	var initial bool
	var interval time.Duration
	c := &cobra.Command{
		Use:   "watch [REPO]",
		Short: "Follow ref changes of a repository (of every repository without REPO) until interrupted",
		Long: `Follow ref changes of a repository, or of every repository, until interrupted.

A broken stream is resumed where it stopped, with no change missed or shown
twice. --since REV starts after revision REV (a revision a mutation printed,
or a resume_revision saved from -o json); --initial first lists the refs that
exist, once complete, then follows the changes after them. Human output
shows one line per change; bookmarks (progress with no change) only appear
with -o json.

With -o json each line is a WatchRefsResponse holding at most one event;
resume_revision is set on the line that completes a server message (the last
event of a change, INITIAL_END, BOOKMARK): save it and pass it to --since to
continue after that line. If the revision to resume from was compacted the
command fails (exit 9): run it again with --initial.`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usagef("%s takes at most 1 argument: [REPO]", c.CommandPath())
			}
			return nil
		},
		PreRunE: func(c *cobra.Command, args []string) error {
			switch {
			case since < 0:
				return usagef("--since %d: a revision is positive", since)
			case since != 0 && initial:
				return usagef("--since and --initial cannot be combined")
			case interval < 0:
				return usagef("--progress-interval %s is negative", interval)
			}
			return nil
		},
		RunE: a.run(func(ctx context.Context, cl *client.Client, args []string) error {
			repo := ""
			if len(args) == 1 {
				repo = args[0]
			}
			p := &watchPrinter{a: a, allRepos: repo == ""}
			err := cl.Watch(ctx, client.WatchOptions{
				Repository: repo, StartRevision: since, InitialState: initial, ProgressInterval: interval,
				OnRetry: func(err error, wait time.Duration) {
					fmt.Fprintf(a.streams.Err, "gravelerctl: watch: %v; resuming in %s\n", err, wait.Round(time.Millisecond))
				},
			}, p.handle)
			if ce, ok := errors.AsType[*client.RevisionCompactedError](err); ok {
				return compactedError{ce}
			}
			if err != nil && ctx.Err() != nil {
				// Interrupted: the normal end of a watch.
				return nil
			}
			return err
		}),
	}
	f := c.Flags()
	f.Int64Var(&since, "since", 0, "follow the changes after this revision (default: from now)")
	f.BoolVar(&initial, "initial", false, "first list the refs that exist, then follow their changes")
	f.DurationVar(&interval, "progress-interval", 0, "with no change, a bookmark at least this often (-o json; 0: the server's default)")
	return c
}

// compactedError prints as advice instead of the server's status, and is
// classified like that status (OUT_OF_RANGE: ExitInvalidArgument).
type compactedError struct {
	ce *client.RevisionCompactedError
}

func (e compactedError) Error() string {
	return fmt.Sprintf("revision %d was compacted (compact revision %d); run again with --initial",
		e.ce.Revision, e.ce.CompactRevision)
}

func (e compactedError) Is(target error) bool { return errors.Is(e.ce, target) }

// watchPrinter prints the messages of a watch. It holds back the initial
// state until its INITIAL_END, so that a stream broken in the middle of it
// (which sends the whole state again) never shows a partial or repeated
// one.
type watchPrinter struct {
	a        *app
	allRepos bool
	pending  []*pb.WatchRefsResponse
}

func (p *watchPrinter) handle(m *client.WatchMessage) error {
	if m.InitialRestart {
		p.pending = nil
	}
	switch m.GetKind() {
	case pb.WatchRefsResponse_KIND_INITIAL:
		p.pending = append(p.pending, m.WatchRefsResponse)
		return nil
	case pb.WatchRefsResponse_KIND_INITIAL_END:
		for _, pm := range p.pending {
			if err := p.print(pm); err != nil {
				return err
			}
		}
		p.pending = nil
	}
	return p.print(m.WatchRefsResponse)
}

func (p *watchPrinter) print(m *pb.WatchRefsResponse) error {
	if p.a.output == "json" {
		return p.printJSON(m)
	}
	w := p.a.streams.Out
	var err error
	switch m.GetKind() {
	case pb.WatchRefsResponse_KIND_INITIAL_END:
		_, err = fmt.Fprintf(w, "-- initial state ends at rev=%d\n", m.GetRevision())
	case pb.WatchRefsResponse_KIND_BOOKMARK:
		// Nothing happened: nothing to say to a person.
	default:
		for _, e := range m.GetEvents() {
			if _, err = fmt.Fprintf(w, "rev=%d %s\n", e.GetRevision(), p.describe(e)); err != nil {
				break
			}
		}
	}
	return err
}

// printJSON prints one line per event; the resume revision goes on the
// last, since resuming from it skips the whole message.
func (p *watchPrinter) printJSON(m *pb.WatchRefsResponse) error {
	evs := m.GetEvents()
	if len(evs) == 0 {
		return p.a.emit(m, nil)
	}
	for i, e := range evs {
		line := &pb.WatchRefsResponse{Kind: m.GetKind(), Revision: m.GetRevision(), Events: []*pb.RefEvent{e}}
		if i == len(evs)-1 {
			line.ResumeRevision = m.GetResumeRevision()
		}
		if err := p.a.emit(line, nil); err != nil {
			return err
		}
	}
	return nil
}

func (p *watchPrinter) describe(e *pb.RefEvent) string {
	var b strings.Builder
	repo := safe(lastSegment(e.GetRepository()))
	if p.allRepos {
		switch e.GetType() {
		case pb.RefEvent_TYPE_REPOSITORY_CREATED, pb.RefEvent_TYPE_REPOSITORY_DELETED, pb.RefEvent_TYPE_REPOSITORY_EXISTS:
		default:
			b.WriteString(repo + ": ")
		}
	}
	branch, tag := safe(lastSegment(e.GetBranch())), safe(lastSegment(e.GetTag()))
	oldID, newID := short(e.GetOldCommitId()), short(e.GetCommitId())
	switch e.GetType() {
	case pb.RefEvent_TYPE_REPOSITORY_CREATED, pb.RefEvent_TYPE_REPOSITORY_EXISTS:
		verb := "created"
		if e.GetType() == pb.RefEvent_TYPE_REPOSITORY_EXISTS {
			verb = "exists"
		}
		fmt.Fprintf(&b, "repository %s %s", repo, verb)
		if def := e.GetRepositoryInfo().GetDefaultBranch(); def != "" && newID != "" {
			fmt.Fprintf(&b, " (default branch %s at %s)", safe(def), newID)
		} else if e.GetType() == pb.RefEvent_TYPE_REPOSITORY_CREATED {
			b.WriteString(" (bare)")
		}
	case pb.RefEvent_TYPE_REPOSITORY_DELETED:
		fmt.Fprintf(&b, "repository %s deleted", repo)
	case pb.RefEvent_TYPE_BRANCH_CREATED:
		fmt.Fprintf(&b, "branch %s created at %s", branch, newID)
	case pb.RefEvent_TYPE_BRANCH_EXISTS:
		fmt.Fprintf(&b, "branch %s at %s", branch, newID)
	case pb.RefEvent_TYPE_BRANCH_MOVED:
		if e.GetCause() == pb.RefEvent_CAUSE_RESET {
			fmt.Fprintf(&b, "branch %s staged changes discarded (at %s)", branch, newID)
			break
		}
		fmt.Fprintf(&b, "branch %s moved %s..%s", branch, oldID, newID)
		if c := e.GetCommit(); c != nil {
			fmt.Fprintf(&b, " %s %s by %s", causeWord(e.GetCause()), strconv.Quote(firstLine(c.GetMessage())), safe(c.GetCommitter()))
		} else if e.GetCause() != pb.RefEvent_CAUSE_UNSPECIFIED {
			fmt.Fprintf(&b, " (%s)", causeWord(e.GetCause()))
		}
	case pb.RefEvent_TYPE_BRANCH_DELETED:
		fmt.Fprintf(&b, "branch %s deleted (was %s)", branch, oldID)
	case pb.RefEvent_TYPE_TAG_CREATED:
		fmt.Fprintf(&b, "tag %s created at %s", tag, newID)
	case pb.RefEvent_TYPE_TAG_EXISTS:
		fmt.Fprintf(&b, "tag %s at %s", tag, newID)
	case pb.RefEvent_TYPE_TAG_DELETED:
		fmt.Fprintf(&b, "tag %s deleted (was %s)", tag, oldID)
	default:
		// An event of a newer server: name its type and ref.
		name := e.GetTag()
		if name == "" {
			name = e.GetBranch()
		}
		if name == "" {
			name = e.GetRepository()
		}
		fmt.Fprintf(&b, "%s %s", e.GetType(), safe(lastSegment(name)))
	}
	return b.String()
}

func causeWord(c pb.RefEvent_Cause) string {
	switch c {
	case pb.RefEvent_CAUSE_COMMIT:
		return "commit"
	case pb.RefEvent_CAUSE_MERGE:
		return "merge"
	case pb.RefEvent_CAUSE_REVERT:
		return "revert"
	case pb.RefEvent_CAUSE_CHERRY_PICK:
		return "cherry-pick"
	case pb.RefEvent_CAUSE_RESET:
		return "reset"
	case pb.RefEvent_CAUSE_RESET_HARD:
		return "reset-hard"
	case pb.RefEvent_CAUSE_RESTORE:
		return "restore"
	case pb.RefEvent_CAUSE_CREATE:
		return "create"
	}
	return "change"
}

// safe quotes a name that holds anything but printable characters, so
// that a name cannot forge lines or drive the terminal.
func safe(s string) string {
	for _, r := range s {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) || r == '"' {
			return strconv.Quote(s)
		}
	}
	return s
}
