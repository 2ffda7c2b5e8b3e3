// Package gravelerv1 is the Go of the gRPC API graveler.v1: the request,
// response and record messages, and the GravelerService client and server
// stubs, generated from graveler.proto by protoc-gen-go and
// protoc-gen-go-grpc (`go generate ./api/...`). What each method does, its
// limits and its paging are documented on the service in graveler.proto.
// This file is written by hand: buf writes only the .pb.go files and does
// not clean the directory, so it survives regeneration.
//
// Concurrency: a GravelerServiceClient is safe for concurrent use, as the
// grpc.ClientConn under it is. Messages follow protobuf-go's rules: any
// number of goroutines may read or marshal one, none may change it
// meanwhile.
//
// Errors: a client method returns a gRPC status error (status.FromError,
// status.Code) carrying the server's google.rpc.ErrorInfo, domain
// "graveler.v1", whose reason a program switches on (docs/operations.md,
// "Errors a client sees"). The generated types return no errors of their
// own; proto.Marshal and proto.Unmarshal return protobuf's.
package gravelerv1
