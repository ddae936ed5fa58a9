package sim

import (
	"context"
	"time"

	timeapi "github.com/siderolabs/talos/pkg/machinery/api/time"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// timeAPI is machined's TimeService (v1.11.0, v1.13.9 and v1.14.1
// internal/app/machined/internal/server/v1alpha1/v1alpha1_time.go
// TimeServer, registered by v1alpha1_server.go Register). Talos asks the
// NTP server (beevik/ntp Query); the sim asks none: its clocks are always
// in sync (doc.go, "What stays kinder than Talos"), so the server's time is
// the machine's own, and a server that does not answer is not modelled.
type timeAPI struct {
	timeapi.UnimplementedTimeServiceServer

	fleet *Fleet
}

// Time asks the first time server of the machine's config
// (NetworkTimeSyncConfig: machine.time or a TimeSyncConfig document), else
// constants.DefaultNTPServer, as TimeServer.Time does.
func (a *timeAPI) Time(ctx context.Context, _ *emptypb.Empty) (*timeapi.TimeResponse, error) {
	_, s := target(ctx)

	server := constants.DefaultNTPServer
	if s.active != nil {
		if cfg := s.active.NetworkTimeSyncConfig(); cfg != nil && len(cfg.Servers()) > 0 {
			server = cfg.Servers()[0]
		}
	}

	return a.TimeCheck(ctx, &timeapi.TimeRequest{Server: server})
}

// TimeCheck asks the given server, as TimeServer.TimeCheck does.
func (a *timeAPI) TimeCheck(_ context.Context, in *timeapi.TimeRequest) (*timeapi.TimeResponse, error) {
	if in.GetServer() == "" {
		return nil, status.Errorf(codes.InvalidArgument, "ntp server is required")
	}

	now := time.Now()

	return &timeapi.TimeResponse{Messages: []*timeapi.Time{{
		Server:     in.Server,
		Localtime:  timestamppb.New(now),
		Remotetime: timestamppb.New(now),
	}}}, nil
}
