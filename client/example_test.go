package client_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"go.uber.org/zap"

	pb "graveler/api/graveler/v1"
	"graveler/client"
	"graveler/server/daemon"
)

// startServer runs a throwaway gravelerd for the example.
func startServer() (addr string, stop func()) {
	dir, _ := os.MkdirTemp("", "graveler-example")
	ready := make(chan string, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- daemon.Run(ctx, daemon.Config{
			ListenAddr: "127.0.0.1:0", DataDir: dir, EmbeddedEtcdUnsafeNoFsync: true, EmbeddedEtcdFast: true,
			Logger: zap.NewNop(), Ready: func(a string) { ready <- a },
		})
	}()
	select {
	case addr = <-ready:
	case err := <-done:
		panic(err)
	}
	return addr, func() { cancel(); <-done; os.RemoveAll(dir) }
}

func ExampleDial() {
	addr, stop := startServer()
	defer stop()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := client.Dial(ctx, addr, client.WithTimeout(10*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cl.Close()

	if _, err := cl.CreateRepository(ctx, &pb.CreateRepositoryRequest{RepositoryId: "example"}); err != nil {
		fmt.Println(err)
		return
	}
	_, err = cl.PutEntry(ctx, &pb.PutEntryRequest{
		Branch: client.Branch("example", "main"),
		Entry:  &pb.Entry{Key: []byte("a.txt"), Value: &pb.Value{Identity: []byte("h1"), Data: []byte("hello")}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	got, _ := cl.GetEntry(ctx, &pb.GetEntryRequest{Repository: client.Repository("example"), Ref: "main", Key: []byte("a.txt")})
	fmt.Printf("%s\n", got.GetEntry().GetValue().GetData())

	_, err = cl.GetBranch(ctx, &pb.GetBranchRequest{Name: client.Branch("example", "nope")})
	fmt.Println(errors.Is(err, client.ErrNotFound), client.Reason(err))
	// Output:
	// hello
	// true BRANCH_NOT_FOUND
}
