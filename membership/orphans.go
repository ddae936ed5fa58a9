package membership

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	etcdres "github.com/siderolabs/talos/pkg/machinery/resources/etcd"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/inventory"
	"devata.dev/devata/talosapi"
)

// Orphan is an etcd member or a Kubernetes Node that no machine of the
// inventory has.
type Orphan struct {
	Name string `json:"name"`
	// Member: an etcd member (a control plane), with its ID as
	// talosctl etcd remove-member takes it.
	Member   bool   `json:"member,omitempty"`
	MemberID uint64 `json:"memberID,omitempty"`
	// Node: a Kubernetes Node.
	Node bool `json:"node,omitempty"`
}

// What says what the orphan is, for people.
func (o Orphan) What() string {
	switch {
	case o.Member && o.Node:
		return fmt.Sprintf("etcd member %s (ID %s) and Node", o.Name, etcdres.FormatMemberID(o.MemberID))
	case o.Member:
		return fmt.Sprintf("etcd member %s (ID %s)", o.Name, etcdres.FormatMemberID(o.MemberID))
	}
	return "Node " + o.Name
}

// Members is etcd's member list as one answering control plane of the
// inventory reports it: member IDs by hostname, and which control plane
// answered. Control planes are asked in the inventory's order until one
// answers with a running etcd.
type Members struct {
	IDs  map[string]uint64
	From *inventory.Machine
}

// ObserveMembers asks the inventory's control planes for etcd's members.
func ObserveMembers(ctx context.Context, inv *inventory.Inventory, d *talosapi.Dialer, timeout time.Duration) (Members, error) {
	var errs []error
	for _, m := range inv.ControlPlanes() {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		o := talosapi.Observe(cctx, d, m)
		cancel()
		switch {
		case o.Err != nil:
			errs = append(errs, o.Err)
		case o.Etcd == nil:
			errs = append(errs, fmt.Errorf("%s: %w", m.Name, o.EtcdErr))
		default:
			ids := map[string]uint64{}
			for _, name := range o.Etcd.Members {
				ids[name] = o.Etcd.IDs[name]
			}
			return Members{IDs: ids, From: m}, nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	err := fmt.Errorf("no control plane of the inventory reports etcd's members: %v", errs)
	if slices.ContainsFunc(errs, func(e error) bool { return errors.Is(e, talosapi.ErrEtcdNoLeader) }) {
		err = fmt.Errorf("%v; %w: no member lists the members without a leader; bring back the control planes that are down, then run again", err, talosapi.ErrEtcdNoLeader)
	}
	return Members{}, err
}

// Orphans lists the etcd members and Nodes that no machine of inv has, by
// name. kube nil lists etcd members only; an error from either side is
// returned with what the other side found.
func Orphans(ctx context.Context, inv *inventory.Inventory, d *talosapi.Dialer, kube kubernetes.Interface, timeout time.Duration) ([]Orphan, error) {
	byName := map[string]*Orphan{}
	get := func(name string) *Orphan {
		if byName[name] == nil {
			byName[name] = &Orphan{Name: name}
		}
		return byName[name]
	}
	var firstErr error
	if len(inv.ControlPlanes()) > 0 {
		ms, err := ObserveMembers(ctx, inv, d, timeout)
		if err != nil {
			firstErr = err
		}
		for name, id := range ms.IDs {
			if inv.Machine(name) == nil {
				o := get(name)
				o.Member, o.MemberID = true, id
			}
		}
	}
	if kube != nil {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		nodes, err := kube.CoreV1().Nodes().List(cctx, metav1.ListOptions{})
		cancel()
		switch {
		case err != nil && firstErr == nil:
			firstErr = fmt.Errorf("list Nodes: %w", err)
		case err == nil:
			for _, n := range nodes.Items {
				if inv.Machine(n.Name) == nil {
					get(n.Name).Node = true
				}
			}
		}
	}
	out := make([]Orphan, 0, len(byName))
	for _, o := range byName {
		out = append(out, *o)
	}
	slices.SortFunc(out, func(a, b Orphan) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	return out, firstErr
}

func notFound(err error) bool { return apierrors.IsNotFound(err) }
