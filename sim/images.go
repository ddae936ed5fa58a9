package sim

import (
	"fmt"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"devata.dev/devata/internal/talos"
)

// imageAPI is machine.ImageService of every machine of a fleet from Talos
// 1.13 (internal/app/images/images.go, images.NewService); route.go
// answers for the machines below 1.13, which do not have it. Only Pull is
// served.
type imageAPI struct {
	machine.UnimplementedImageServiceServer

	fleet *Fleet
}

// Pull is Service.Pull: the request's containerd instance
// (ctrhelper.ContainerdInstanceHelper: its InvalidArgument errors as they
// are), then image.Pull with WithSkipIfAlreadyPulled: an image the store
// holds under its normalized name is not pulled again; any other is
// resolved in the sim's registry (resolve), its two layers' progress is
// streamed as containerd's pull reports it (progress/pull_progress.go:
// downloading, download complete, extracting, extract complete, the
// layer's ID the first 12 hex digits of its digest), and it lands in the
// store under the names manageAliases gives it. The last message names
// the image, pinned to its digest unless the reference had one
// (repository@sha256:…). A reference that does not parse is machined's
// plain error (code Unknown, "failed to parse image reference %q: …"); an
// image the registry lacks is NotFound "error pulling image: …", in Talos
// 1.13 inside go-retry's error set (its Pull retries, WithMaxNotFoundRetries(0)),
// in 1.14 bare (Pull no longer retries).
func (a *imageAPI) Pull(in *machine.ImageServicePullRequest, srv grpc.ServerStreamingServer[machine.ImageServicePullResponse]) error {
	t, s := target(srv.Context())

	st, err := storeOf(s.version, in.GetContainerd())
	if err != nil {
		return err
	}

	ref, err := parseDockerRef(in.GetImageRef())
	if err != nil {
		return fmt.Errorf("failed to parse image reference %q: %w", in.GetImageRef(), err)
	}

	img, ok := t.pulled(st, ref.String())
	if !ok {
		if img, err = t.fleet.pullable(in.GetImageRef(), ref, s.faults); err != nil {
			if minor, _ := talos.Minor(s.version); minor == 13 {
				err = fmt.Errorf("1 error(s) occurred:\n\t%w", err)
			}

			return status.Errorf(codes.NotFound, "error pulling image: %s", err)
		}

		if err = sendPullProgress(srv, img); err != nil {
			return err
		}

		t.pull(st, ref, img)
	}

	a.fleet.log.Info("sim: image pulled", "machine", t.name, "image", ref.String(), "namespace", st.namespace)

	name := ref.String()
	if ref.digest == "" {
		name = img.repository + "@" + img.digest
	}

	return srv.Send(&machine.ImageServicePullResponse{
		Response: &machine.ImageServicePullResponse_Name{Name: name},
	})
}

// installerLayers are the sizes of an installer image's layers.
var installerLayers = []int64{4 << 20, 92 << 20}

// sendPullProgress streams the progress of a pull, layer by layer.
func sendPullProgress(srv grpc.ServerStreamingServer[machine.ImageServicePullResponse], img pulledImage) error {
	for i, size := range installerLayers {
		id := installerDigest(img.digest, fmt.Sprint(i))[len("sha256:"):][:12]

		for _, p := range []*machine.ImageServicePullLayerProgress{
			{Status: machine.ImageServicePullLayerProgress_DOWNLOADING, Offset: size / 2, Total: size},
			{Status: machine.ImageServicePullLayerProgress_DOWNLOAD_COMPLETE},
			{Status: machine.ImageServicePullLayerProgress_EXTRACTING, Elapsed: durationpb.New(100 * time.Millisecond)},
			{Status: machine.ImageServicePullLayerProgress_EXTRACT_COMPLETE},
		} {
			if err := srv.Send(&machine.ImageServicePullResponse{
				Response: &machine.ImageServicePullResponse_PullProgress{
					PullProgress: &machine.ImageServicePullProgress{LayerId: id, Progress: p},
				},
			}); err != nil {
				return err
			}
		}
	}

	return nil
}
