package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	pb "graveler/api/graveler/v1"
	"graveler/client"
)

// ExampleClient_Watch keeps a map of the branch heads of repository
// "sales" up to date, saving the resume token it could restart from.
func ExampleClient_Watch() {
	ctx := context.Background()
	cl, err := client.Dial(ctx, "127.0.0.1:7070")
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()

	heads := map[string]string{} // branch name -> commit id
	var token int64              // persist it to continue after a restart
	for {
		// Without a token, start from the refs as they are now.
		opts := client.WatchOptions{Repository: "sales", StartRevision: token, InitialState: token == 0}
		err := cl.Watch(ctx, opts, func(m *client.WatchMessage) error {
			if m.InitialRestart {
				clear(heads) // the initial state starts again
			}
			for _, e := range m.GetEvents() {
				switch e.GetType() {
				case pb.RefEvent_TYPE_BRANCH_EXISTS, pb.RefEvent_TYPE_BRANCH_CREATED, pb.RefEvent_TYPE_BRANCH_MOVED:
					heads[e.GetBranch()] = e.GetCommitId()
				case pb.RefEvent_TYPE_BRANCH_DELETED:
					delete(heads, e.GetBranch())
				case pb.RefEvent_TYPE_REPOSITORY_DELETED:
					clear(heads)
				}
			}
			if m.GetResumeRevision() != 0 {
				token = m.GetResumeRevision()
				fmt.Printf("at revision %d: %d branches\n", token, len(heads))
			}
			return nil
		})
		if errors.Is(err, client.ErrRevisionCompacted) {
			// The changes since token are gone: relist.
			token = 0
			clear(heads)
			continue
		}
		log.Fatal(err)
	}
}
