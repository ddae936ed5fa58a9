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
// resolved in the sim's registry (resolve), pulled for the machine's
// installer pull delay under the caller's context (pull.go: past the
// caller's deadline nothing is stored, and the error is pullCancelled's),
// its two layers' progress streamed meanwhile as containerd's pull
// reports it (progress/pull_progress.go: downloading every 100ms, download
// complete, extracting, extract complete, the layer's ID the first 12 hex
// digits of its digest), and it lands in the store under the names
// manageAliases gives it. The last message names
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

		if err = sendPullProgress(srv, img, a.fleet.installerPullDelay(s.faults)); err != nil {
			if ctx := srv.Context(); ctx.Err() != nil {
				a.fleet.log.Info("sim: image pull cancelled by the caller", "machine", t.name, "image", ref.String(), "error", err)

				return pullCancelled(s.version, ref, ctx.Err())
			}

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

// sendPullProgress streams the progress of a pull that takes d under the
// stream's context (pull.go download): both layers downloading side by
// side, a message per layer every pullTick (at least one, half done),
// then each layer's download complete, extracting and extract complete.
func sendPullProgress(srv grpc.ServerStreamingServer[machine.ImageServicePullResponse], img pulledImage, d time.Duration) error {
	ids := make([]string, len(installerLayers))
	for i := range installerLayers {
		ids[i] = installerDigest(img.digest, fmt.Sprint(i))[len("sha256:"):][:12]
	}

	send := func(id string, p *machine.ImageServicePullLayerProgress) error {
		return srv.Send(&machine.ImageServicePullResponse{
			Response: &machine.ImageServicePullResponse_PullProgress{
				PullProgress: &machine.ImageServicePullProgress{LayerId: id, Progress: p},
			},
		})
	}

	downloading := func(done float64) error {
		for i, size := range installerLayers {
			if err := send(ids[i], &machine.ImageServicePullLayerProgress{
				Status: machine.ImageServicePullLayerProgress_DOWNLOADING, Offset: int64(float64(size) * done), Total: size,
			}); err != nil {
				return err
			}
		}

		return nil
	}

	ticked := false

	if err := download(srv.Context(), d, func(done float64) error {
		ticked = true

		return downloading(done)
	}); err != nil {
		return err
	}

	if !ticked {
		if err := downloading(0.5); err != nil {
			return err
		}
	}

	for i := range installerLayers {
		for _, p := range []*machine.ImageServicePullLayerProgress{
			{Status: machine.ImageServicePullLayerProgress_DOWNLOAD_COMPLETE},
			{Status: machine.ImageServicePullLayerProgress_EXTRACTING, Elapsed: durationpb.New(100 * time.Millisecond)},
			{Status: machine.ImageServicePullLayerProgress_EXTRACT_COMPLETE},
		} {
			if err := send(ids[i], p); err != nil {
				return err
			}
		}
	}

	return nil
}

// pullCancelled is Service.Pull's error when the caller's context ended
// during the pull (pull.go): 1.13's image.Pull retries and returns
// go-retry's error set; 1.14's single attempt wraps the context's error,
// which gRPC answers with its code.
func pullCancelled(version string, ref imageRef, err error) error {
	if minor, _ := talos.Minor(version); minor == 13 {
		return retriedPullError(ref, err)
	}

	return fmt.Errorf("failed to pull image %q: %w", ref, err)
}
