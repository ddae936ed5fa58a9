package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"

	"devata.dev/devata/inventory"
	"devata.dev/devata/talosapi"
)

// etcdDataPath is Talos' constants.EtcdDataPath.
const etcdDataPath = "/var/lib/etcd"

// dataDirFact refines the fact of a control plane whose etcd service is
// Preparing. Preparing alone does not say "no data": a control plane with
// data passes through it on every boot (services/etcd.go PreFunc: the
// image pull, the PKI), and only one without data stays there. The
// evidence is the data directory itself, what Talos' Bootstrap reads
// (v1alpha1_server.go Bootstrap: os.ReadDir(constants.EtcdDataPath)),
// listed with machined's List (os:reader may; the root, then its
// entries): entries mean data, and etcd is starting on it, whatever
// --etcd-settle says; none means empty, and the settle watch still
// applies (a Bootstrap right after a boot is refused until CRI runs).
// When the listing is refused or fails the fact stays as it was, and
// --etcd-settle's watch of Preparing holding is all there is.
func dataDirFact(ctx context.Context, d *talosapi.Dialer, m *inventory.Machine, fact etcdFact) etcdFact {
	entries, err := listEtcdDataDir(ctx, d, m)
	switch {
	case err != nil:
		fact.Seen += fmt.Sprintf("; its data directory could not be listed (%v), so only --etcd-settle's watch tells it from a node with data starting", err)
		return fact
	case len(entries) == 0:
		fact.EmptyDir = true
		fact.Seen += "; its data directory " + etcdDataPath + " is empty"
		return fact
	}
	// an answer that will change: waited for like an unclear one
	seen := fmt.Sprintf("%s, but its data directory %s holds %s: etcd is starting on its data (every boot passes through Preparing)", strings.SplitN(fact.Seen, ":", 2)[0], etcdDataPath, strings.Join(entries, ", "))
	return etcdFact{HasData: true, Starting: true, Seen: seen, Err: errors.New(seen)}
}

// listEtcdDataDir lists the entries of m's etcd data directory, one level.
func listEtcdDataDir(ctx context.Context, d *talosapi.Dialer, m *inventory.Machine) ([]string, error) {
	c, err := d.Client(ctx, m)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	stream, err := c.LS(ctx, &machine.ListRequest{Root: etcdDataPath})
	if err != nil {
		return nil, talosapi.PlainError(err)
	}
	var entries []string
	for {
		fi, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return entries, nil
		}
		if err != nil {
			return nil, talosapi.PlainError(err)
		}
		if fi.GetError() != "" {
			return nil, errors.New(fi.GetError())
		}
		if fi.GetRelativeName() != "." && fi.GetName() != etcdDataPath {
			entries = append(entries, fi.GetRelativeName())
		}
	}
}
