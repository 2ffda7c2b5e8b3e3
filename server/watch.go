package server

import (
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"

	pb "graveler/api/graveler/v1"
	"graveler/feed"
	"graveler/graveler"
)

// ErrWatchUnsupported: the server has no change feed, which only a server
// on etcd has.
var ErrWatchUnsupported = errors.New("server: WatchRefs is not available: this server's metadata store is not etcd, and only etcd has a change feed")

// WatchRefs streams the feed's messages (docs/change-feed.md): one
// subscription per stream, ended by the client, by the feed (shutdown,
// slow consumer, compaction) or by an error of etcd.
func (s *Server) WatchRefs(req *pb.WatchRefsRequest, stream grpc.ServerStreamingServer[pb.WatchRefsResponse]) error {
	name := req.GetRepository()
	if s.cfg.Feed == nil {
		return withResource(ErrWatchUnsupported, "repository", name)
	}
	fr := feed.Request{StartRevision: req.GetStartRevision(), InitialState: req.GetSendInitialState()}
	if name != "" {
		repo, err := parseRepository(name)
		if err != nil {
			return withResource(err, "repository", name)
		}
		fr.Repository = repo
	}
	ms := req.GetProgressIntervalMs()
	if ms < 0 || ms > feed.MaxProgressInterval.Milliseconds() {
		return withResource(fmt.Errorf("%w: progress_interval_ms %d is outside [%d, %d] (0: the default, %d)", feed.ErrInvalidRequest,
			ms, feed.MinProgressInterval.Milliseconds(), feed.MaxProgressInterval.Milliseconds(), feed.DefaultProgressInterval.Milliseconds()), "repository", name)
	}
	fr.ProgressInterval = time.Duration(ms) * time.Millisecond
	if fr.ProgressInterval != 0 && fr.ProgressInterval < feed.MinProgressInterval {
		return withResource(fmt.Errorf("%w: progress_interval_ms %d is below the minimum, %d", feed.ErrInvalidRequest,
			ms, feed.MinProgressInterval.Milliseconds()), "repository", name)
	}
	ctx := stream.Context()
	sub, err := s.cfg.Feed.Subscribe(ctx, fr)
	if err != nil {
		return withResource(err, "repository", name)
	}
	defer sub.Close()
	for {
		m, err := sub.Next(ctx)
		if err != nil {
			return withResource(err, "repository", name)
		}
		if err := stream.Send(watchResponsePB(m)); err != nil {
			return err
		}
	}
}

func watchResponsePB(m *feed.Message) *pb.WatchRefsResponse {
	out := &pb.WatchRefsResponse{
		Kind:           pb.WatchRefsResponse_Kind(m.Kind),
		Revision:       m.Revision,
		ResumeRevision: m.ResumeRevision,
		Events:         make([]*pb.RefEvent, len(m.Events)),
	}
	for i := range m.Events {
		out.Events[i] = refEventPB(&m.Events[i])
	}
	return out
}

var causePB = map[graveler.BranchChange]pb.RefEvent_Cause{
	graveler.ChangeCreate:     pb.RefEvent_CAUSE_CREATE,
	graveler.ChangeCommit:     pb.RefEvent_CAUSE_COMMIT,
	graveler.ChangeMerge:      pb.RefEvent_CAUSE_MERGE,
	graveler.ChangeRevert:     pb.RefEvent_CAUSE_REVERT,
	graveler.ChangeCherryPick: pb.RefEvent_CAUSE_CHERRY_PICK,
	graveler.ChangeReset:      pb.RefEvent_CAUSE_RESET,
	graveler.ChangeResetHard:  pb.RefEvent_CAUSE_RESET_HARD,
	graveler.ChangeRestore:    pb.RefEvent_CAUSE_RESTORE,
}

func refEventPB(e *feed.Event) *pb.RefEvent {
	out := &pb.RefEvent{
		Type:        pb.RefEvent_Type(e.Type),
		Revision:    e.Revision,
		Repository:  RepositoryName(e.Repository),
		OldCommitId: string(e.OldCommitID),
		CommitId:    string(e.CommitID),
		Cause:       causePB[e.Cause],
	}
	if e.Branch != "" {
		out.Branch = BranchName(e.Repository, e.Branch)
	}
	if e.Tag != "" {
		out.Tag = TagName(e.Repository, e.Tag)
	}
	if e.Commit != nil {
		out.Commit = commitPB(e.Repository, &graveler.CommitRecord{CommitID: e.CommitID, Commit: e.Commit})
	}
	if e.RepositoryInfo != nil {
		out.RepositoryInfo = repositoryPB(&graveler.RepositoryRecord{RepositoryID: e.Repository, Repository: e.RepositoryInfo})
	}
	return out
}
