package server

import (
	"context"

	pb "graveler/api/graveler/v1"
	"graveler/buildinfo"
	_ "graveler/buildinfo/metric" // graveler_build_info on gravelerd's /metrics
)

// GetServerVersion answers with the build this server runs. It reads
// nothing from the store, so it answers even while etcd is unreachable.
func (s *Server) GetServerVersion(context.Context, *pb.GetServerVersionRequest) (*pb.GetServerVersionResponse, error) {
	return &pb.GetServerVersionResponse{Version: buildinfo.Version, GoVersion: buildinfo.GoVersion()}, nil
}
