package sim

import (
	"io/fs"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// etcdDataPath is constants.EtcdDataPath, etcd's data directory on
// EPHEMERAL, a directory volume (EtcdDataVolumeID) that exists on a
// control plane before the etcd service's PreFunc runs.
const etcdDataPath = "/var/lib/etcd"

// List is machined's file listing (Talos v1.11.0 and v1.14.1
// v1alpha1_server.go List, pkg/archiver walker.go Walker) for the one
// directory the sim has: etcd's data directory, the evidence Bootstrap
// itself reads (os.ReadDir(constants.EtcdDataPath)). The root is made
// absolute and its trailing separator dropped; the reply is the root
// (RelativeName ".") then, the root always being entered, its entries:
// "member" while the node holds etcd data or what a failed restore wrote
// (etcdDataDirFull), nothing while it is empty. Without Recurse deeper
// directories are not entered, so the sim serves no more. A node without
// the directory (a worker) fails as the walker's Lstat does. Any other
// root is not modelled: Unimplemented, never an invented listing.
func (a *machineAPI) List(req *machine.ListRequest, srv grpc.ServerStreamingServer[machine.FileInfo]) error {
	t, s := target(srv.Context())

	root := req.GetRoot()
	if !strings.HasPrefix(root, "/") {
		root = "/" + root
	}

	root = strings.TrimSuffix(root, "/")

	if root != etcdDataPath {
		return status.Errorf(codes.Unimplemented, "the simulated node lists only %s, not %q", etcdDataPath, req.GetRoot())
	}

	if !s.controlPlane() {
		return status.Errorf(codes.Unknown, "lstat %s: no such file or directory", etcdDataPath)
	}

	full := t.etcdDataDirFull()
	if full && req.GetRecurse() && req.GetRecursionDepth() != 1 {
		return status.Errorf(codes.Unimplemented, "the simulated node lists %s one level deep only", etcdDataPath)
	}

	dir := uint32(fs.ModeDir | 0o700)

	if err := srv.Send(&machine.FileInfo{Name: etcdDataPath, RelativeName: ".", IsDir: true, Mode: dir, Size: 4096, Uid: 60, Gid: 60}); err != nil {
		return err
	}

	if !full {
		return nil
	}

	return srv.Send(&machine.FileInfo{Name: etcdDataPath + "/member", RelativeName: "member", IsDir: true, Mode: dir, Size: 4096, Uid: 60, Gid: 60})
}
