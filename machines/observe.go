package machines

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"sync"

	cosiv1alpha1 "github.com/cosi-project/runtime/api/v1alpha1"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	configpb "github.com/siderolabs/talos/pkg/machinery/api/resource/config"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/resources/v1alpha1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"devata.dev/devata/inventory"
)

// Observation is what one pass read from one machine. Each fact carries its own
// error, so that a permission problem on one resource makes only the checks
// that need it Unknown.
type Observation struct {
	Machine  *inventory.Machine
	Endpoint string
	// Err is set when the machine could not be reached at all; every fact is then empty.
	Err error
	// Maintenance is set when the machine answers only insecurely, unconfigured.
	Maintenance bool

	Version    string
	VersionErr error

	// Active is the applied machine config (MachineConfig v1alpha1) as Talos stores it.
	// Holders drop it once compared; ActiveHash stays.
	Active     []byte
	ActiveHash [32]byte
	// PersistentHash is the config staged for the next boot; differing from ActiveHash means staged, not applied.
	PersistentHash [32]byte
	HasPersistent  bool
	ConfigErr      error

	Stage     string
	Ready     bool
	Unmet     []string
	StatusErr error

	Kubelet    ServiceState
	KubeletErr error

	// Etcd is read on control planes only.
	Etcd    *EtcdState
	EtcdErr error
}

// ServiceState is a Talos service's state.
type ServiceState struct {
	Running, Healthy, Unknown bool
}

// EtcdState is one control plane's view of etcd.
type EtcdState struct {
	Members  []string // member hostnames
	Learners []string
	MemberID uint64
	Leader   uint64
	Errors   []string
}

// Observe reads everything the machine checks need from one machine, with the
// calls in flight together on one connection: the cost is one round trip plus
// the slowest read. It never returns an error: failures are in the Observation.
func Observe(ctx context.Context, d *Dialer, m *inventory.Machine) *Observation {
	c, err := d.Client(ctx, m)
	if err != nil {
		return &Observation{Machine: m, Endpoint: d.Endpoint(m), Err: fmt.Errorf("dial %s: %w", d.Endpoint(m), err)}
	}
	defer c.Close()
	return ObserveWith(ctx, c, d, m)
}

// ObserveWith is Observe over a client the caller holds, so that other
// checks (storage) can read on the same connection.
func ObserveWith(ctx context.Context, c *client.Client, d *Dialer, m *inventory.Machine) *Observation {
	o := &Observation{Machine: m, Endpoint: d.Endpoint(m)}

	// Version first: it tells reachable from not, and maintenance from configured.
	resp, err := c.Version(ctx)
	if err != nil {
		o.Err = fmt.Errorf("talos api %s: %w", o.Endpoint, PlainError(err))
		if IsUnreachable(err) && detectMaintenance(ctx, d, m) {
			o.Err = fmt.Errorf("talos api %s: the machine is in maintenance mode (not configured yet)", o.Endpoint)
			o.Maintenance = true
		}
		return o
	}
	if len(resp.GetMessages()) > 0 {
		o.Version = resp.GetMessages()[0].GetVersion().GetTag()
	}

	var wg sync.WaitGroup
	read := func(fn func()) {
		wg.Add(1)
		go func() { defer wg.Done(); fn() }()
	}
	read(func() {
		active, err := readMachineConfig(ctx, c, config.ActiveID)
		if err != nil {
			o.ConfigErr = fmt.Errorf("read MachineConfig %s: %w", config.ActiveID, PlainError(err))
			return
		}
		o.Active, o.ActiveHash = active, sha256.Sum256(active)
	})
	read(func() {
		p, err := readMachineConfig(ctx, c, config.PersistentID)
		if err != nil {
			return // no persistent config is normal before the first reboot; the active one decides
		}
		o.PersistentHash, o.HasPersistent = sha256.Sum256(p), true
	})
	read(func() {
		ms, err := safe.StateGet[*runtime.MachineStatus](ctx, c.COSI, resource.NewMetadata(runtime.NamespaceName, runtime.MachineStatusType, runtime.MachineStatusID, resource.VersionUndefined))
		if err != nil {
			o.StatusErr = fmt.Errorf("read MachineStatus: %w", PlainError(err))
			return
		}
		spec := ms.TypedSpec()
		o.Stage, o.Ready = spec.Stage.String(), spec.Status.Ready
		for _, u := range spec.Status.UnmetConditions {
			o.Unmet = append(o.Unmet, u.Name+": "+u.Reason)
		}
	})
	read(func() {
		svc, err := safe.StateGet[*v1alpha1.Service](ctx, c.COSI, resource.NewMetadata(v1alpha1.NamespaceName, v1alpha1.ServiceType, "kubelet", resource.VersionUndefined))
		if err != nil {
			o.KubeletErr = fmt.Errorf("read Service kubelet: %w", PlainError(err))
			return
		}
		s := svc.TypedSpec()
		o.Kubelet = ServiceState{Running: s.Running, Healthy: s.Healthy, Unknown: s.Unknown}
	})
	if m.IsControlPlane() {
		read(func() { o.Etcd, o.EtcdErr = observeEtcd(ctx, c) })
	}
	wg.Wait()
	return o
}

// readMachineConfig returns a MachineConfig resource's bytes as Talos stores
// them. It reads the raw COSI resource and takes the spec's YAML bytes: the
// typed client would parse the whole config into a machinery provider (a
// third of a drift pass's CPU) only for devata to ask for those bytes back.
func readMachineConfig(ctx context.Context, c *client.Client, id resource.ID) ([]byte, error) {
	resp, err := cosiv1alpha1.NewStateClient(c.Conn()).Get(ctx, &cosiv1alpha1.GetRequest{
		Namespace: config.NamespaceName, Type: config.MachineConfigType, Id: id,
	})
	if err != nil {
		return nil, err
	}
	var spec configpb.MachineConfigSpec
	if err := proto.Unmarshal(resp.GetResource().GetSpec().GetProtoSpec(), &spec); err != nil {
		return nil, fmt.Errorf("decode MachineConfig %s: %w", id, err)
	}
	return spec.GetYamlMarshalled(), nil
}

func observeEtcd(ctx context.Context, c *client.Client) (*EtcdState, error) {
	var (
		wg                sync.WaitGroup
		members           *machine.EtcdMemberListResponse
		status            *machine.EtcdStatusResponse
		membersErr, stErr error
	)
	wg.Add(2)
	go func() {
		defer wg.Done()
		members, membersErr = c.EtcdMemberList(ctx, &machine.EtcdMemberListRequest{QueryLocal: true})
	}()
	go func() { defer wg.Done(); status, stErr = c.EtcdStatus(ctx) }()
	wg.Wait()
	if membersErr != nil {
		return nil, fmt.Errorf("etcd member list: %w", PlainError(membersErr))
	}
	st := &EtcdState{}
	for _, msg := range members.GetMessages() {
		for _, mem := range msg.GetMembers() {
			if mem.GetIsLearner() {
				st.Learners = append(st.Learners, mem.GetHostname())
			} else {
				st.Members = append(st.Members, mem.GetHostname())
			}
		}
	}
	if stErr != nil {
		return st, fmt.Errorf("etcd status: %w", PlainError(stErr))
	}
	for _, msg := range status.GetMessages() {
		ms := msg.GetMemberStatus()
		st.MemberID, st.Leader = ms.GetMemberId(), ms.GetLeader()
		st.Errors = append(st.Errors, ms.GetErrors()...)
	}
	return st, nil
}

// detectMaintenance asks insecurely, as talosctl --insecure would: a machine in
// maintenance mode serves a self-signed certificate and answers there.
func detectMaintenance(ctx context.Context, d *Dialer, m *inventory.Machine) bool {
	c, err := d.MaintenanceClient(ctx, m)
	if err != nil {
		return false
	}
	defer c.Close()
	_, err = c.Version(ctx)
	if err == nil {
		return true
	}
	code := client.StatusCode(err)
	return code != codes.Unavailable && code != codes.DeadlineExceeded && code != codes.Canceled
}

// IsUnreachable reports whether err means the machine did not answer at all.
func IsUnreachable(err error) bool {
	switch client.StatusCode(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return errors.Is(err, context.DeadlineExceeded)
}

// PlainError shortens gRPC's "rpc error: code = X desc = Y" to "Y (X)" for
// people, keeping the original underneath for client.StatusCode and errors.Is.
func PlainError(err error) error {
	msg := err.Error()
	if i := strings.Index(msg, "desc = "); strings.HasPrefix(msg, "rpc error: code = ") && i > 0 {
		code := strings.TrimSpace(strings.TrimPrefix(msg[:i], "rpc error: code = "))
		desc := msg[i+len("desc = "):]
		// gRPC wraps dial failures as `connection error: desc = "transport: …: read
		// tcp a->b: read: connection reset by peer"`: the last part is the news.
		if inner, ok := strings.CutPrefix(desc, `connection error: desc = "`); ok {
			inner = strings.TrimSuffix(inner, `"`)
			if j := strings.LastIndex(inner, ": "); j >= 0 {
				inner = inner[j+2:]
			}
			desc = "not reachable: " + inner
		}
		return &apiError{msg: fmt.Sprintf("%s (%s)", desc, code), err: err}
	}
	return err
}

type apiError struct {
	msg string
	err error
}

func (e *apiError) Error() string { return e.msg }
func (e *apiError) Unwrap() error { return e.err }

// GRPCStatus lets status.FromError and client.StatusCode see the original code.
func (e *apiError) GRPCStatus() *status.Status { s, _ := status.FromError(e.err); return s }
