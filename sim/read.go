package sim

import (
	"errors"
	"path"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/version"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// readChunk is the size of each Data message Read sends: machined reads
// the file through pkg/chunker/stream's Chunker, 1024 bytes at a time.
const readChunk = 1024

// Read streams one file of the machine, as machined's Read does
// (v1alpha1_server.go Read, v1.11.0 and v1.14.1 alike): os.Stat of the
// path, NotFound with os.Stat's error text for a file that is not there,
// "path must be a regular file" (code Unknown) for anything else, then
// the file's bytes in 1024-byte chunks. Only os:admin may call it
// (services/machined.go rules); apid forwards it to one node (apid
// service.go: a streamed method). The sim's machine has no filesystem, so
// Read serves the few files whose content the sim knows (readFile); every
// other path is NotFound, as a file Talos does not have would be, and the
// directories above those files are directories.
func (a *machineAPI) Read(in *machine.ReadRequest, srv grpc.ServerStreamingServer[common.Data]) error {
	_, s := target(srv.Context())

	// machined's working directory is /
	p := in.GetPath()
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	p = path.Clean(p)

	data, err := s.readFile(p, in.GetPath())
	if err != nil {
		return err
	}

	for len(data) > 0 {
		n := min(readChunk, len(data))
		if err := srv.Send(&common.Data{Bytes: data[:n]}); err != nil {
			return nil // machined cancels its chunker and returns nil
		}

		data = data[n:]
	}

	return nil
}

// readFile is the content of the file at p (clean and absolute; asked as
// the caller wrote it) on the machine, or the error machined's Read
// answers for it.
//
//   - /etc/os-release: the rootfs' file, pkg/machinery/version
//     OSReleaseFor("Talos", the release's tag);
//   - /proc/sys/kernel/random/boot_id: the kernel's boot ID, a new one
//     every boot (bootID), with its newline;
//   - /system/state/config.yaml: the machine config machined saved on the
//     STATE partition (constants.StateMountPoint, ConfigFilename): the
//     config the machine boots with next.
func (s snapshot) readFile(p, asked string) ([]byte, error) {
	files := map[string]func() ([]byte, error){
		"/etc/os-release": func() ([]byte, error) { return version.OSReleaseFor("Talos", s.version) },
		"/proc/sys/kernel/random/boot_id": func() ([]byte, error) {
			return []byte(s.bootID() + "\n"), nil
		},
	}

	if s.persisted != nil {
		files["/system/state/config.yaml"] = s.persisted.Bytes
	}

	if read, ok := files[p]; ok {
		data, err := read()
		if err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}

		return data, nil
	}

	for f := range files {
		if p == "/" || strings.HasPrefix(f, p+"/") {
			return nil, errors.New("path must be a regular file")
		}
	}

	return nil, status.Error(codes.NotFound, "stat "+asked+": no such file or directory")
}
