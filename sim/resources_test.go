package sim_test

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	cryptox509 "github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc/codes"

	"devata.dev/devata/sim"
)

const extraMountPatch = `machine:
  kubelet:
    extraMounts:
      - destination: /var/mnt/data
        type: bind
        source: /var/mnt/data
        options: [bind, rshared, rw]
`

func TestKubernetesResources(t *testing.T) {
	t.Parallel()

	cp, _ := baseConfigs(t)
	noProxy := patch(t, cp, "cluster:\n  proxy:\n    disabled: true\n")
	f := start(t,
		sim.MachineSpec{Name: "cp-1", Role: "controlplane", Config: patch(t, cp, extraMountPatch)},
		sim.MachineSpec{Name: "cp-2", Role: "controlplane", Config: noProxy},
	)
	c := admin(t, f.Machine("cp-1").Addr())

	ks, err := safe.StateGet[*k8s.KubeletSpec](t.Context(), c.COSI, k8s.NewKubeletSpec(k8s.NamespaceName, k8s.KubeletID).Metadata())
	if err != nil {
		t.Fatalf("kubelet spec: %v", err)
	}

	if mounts := ks.TypedSpec().ExtraMounts; len(mounts) != 1 || mounts[0].Destination != "/var/mnt/data" || !slices.Contains(mounts[0].Options, "rshared") {
		t.Errorf("kubelet extra mounts = %+v", mounts)
	}

	// KubePrism listens on 127.0.0.1 (controllers/k8s/kubeprism_config.go)
	// and is healthy only with an upstream API server (kubeprism.go
	// writeKubePrismStatus): none runs before etcd does.
	prism := func() *k8s.KubePrismStatusesSpec {
		t.Helper()

		st, err := safe.StateGet[*k8s.KubePrismStatuses](t.Context(), c.COSI, k8s.NewKubePrismStatuses(k8s.NamespaceName, k8s.KubePrismStatusesID).Metadata())
		if err != nil {
			t.Fatalf("kubeprism: %v", err)
		}

		return st.TypedSpec()
	}
	if p := prism(); p.Healthy || p.Host != "127.0.0.1:7445" {
		t.Errorf("kubeprism before bootstrap = %+v, want 127.0.0.1:7445, not healthy", p)
	}

	addr, err := safe.StateGet[*network.NodeAddress](t.Context(), c.COSI, network.NewNodeAddress(network.NamespaceName, network.NodeAddressCurrentID).Metadata())
	if err != nil || !slices.Contains(addr.TypedSpec().Addresses, netip.MustParsePrefix("127.0.0.1/32")) {
		t.Errorf("node addresses = %v, %v", addr, err)
	}

	disks, err := safe.StateListAll[*block.Disk](t.Context(), c.COSI)
	if err != nil || disks.Len() != 3 {
		t.Errorf("disks = %v, %v; want 3 (system, data, spare)", disks, err)
	}

	manifests := func(name string) ([]string, error) {
		st, err := safe.StateGet[*k8s.ManifestStatus](client.WithNode(t.Context(), name), c.COSI, k8s.NewManifestStatus(k8s.ControlPlaneNamespaceName).Metadata())
		if err != nil {
			return nil, err
		}

		return st.TypedSpec().ManifestsApplied, nil
	}

	// manifests exist once the control plane is bootstrapped
	if _, err := manifests("cp-1"); !state.IsNotFoundError(err) {
		t.Errorf("manifests before bootstrap: %v, want not found", err)
	}

	if err := c.Bootstrap(t.Context(), &machine.BootstrapRequest{}); err != nil {
		t.Fatalf("bootstrap: %v", err)
	}

	if p := prism(); !p.Healthy {
		t.Errorf("kubeprism after bootstrap = %+v, want healthy", p)
	}

	eventually(t, "cp-2 joins etcd and shows its manifests", func() error {
		_, err := manifests("cp-2")
		return err
	})

	for _, tc := range []struct {
		machine   string
		kubeProxy bool
	}{{"cp-1", true}, {"cp-2", false}} {
		got, err := manifests(tc.machine)
		if err != nil {
			t.Fatalf("manifests on %s: %v", tc.machine, err)
		}

		if slices.Contains(got, "10-kube-proxy") != tc.kubeProxy {
			t.Errorf("%s manifests = %v, kube-proxy wanted: %t", tc.machine, got, tc.kubeProxy)
		}
	}
}

func TestServiceEvents(t *testing.T) {
	t.Parallel()

	cp, _ := baseConfigs(t)
	f := start(t, sim.MachineSpec{Name: "cp-1", Role: "controlplane", Config: cp})
	c := admin(t, f.Machine("cp-1").Addr())

	resp, err := c.ServiceList(t.Context())
	if err != nil {
		t.Fatal(err)
	}

	var ids []string

	for _, svc := range resp.Messages[0].Services {
		ids = append(ids, svc.Id)

		for _, ev := range svc.Events.Events {
			// the fleet's machines have been up a minute when it starts
			if ts := ev.Ts.AsTime(); ts.IsZero() || time.Since(ts) > 2*time.Minute {
				t.Errorf("%s event %q has timestamp %v", svc.Id, ev.Msg, ts)
			}
		}
	}

	for _, want := range []string{"apid", "containerd", "etcd", "kubelet", "machined", "trustd"} {
		if !slices.Contains(ids, want) {
			t.Errorf("services %v lack %s", ids, want)
		}
	}

	etcd, err := c.ServiceInfo(t.Context(), "etcd")
	if err != nil || len(etcd) != 1 || etcd[0].Service.State != "Preparing" {
		t.Errorf("etcd before bootstrap = %v, %v; want Preparing", etcd, err)
	}
}

func TestRebootCall(t *testing.T) {
	t.Parallel()

	cp, _ := baseConfigs(t)
	f := start(t, sim.MachineSpec{Name: "cp-1", Role: "controlplane", Config: cp})
	m := f.Machine("cp-1")

	if err := dial(t, readerRoles, m.Addr()).Reboot(t.Context()); client.StatusCode(err) != codes.PermissionDenied {
		t.Errorf("reboot as reader: %v, want PermissionDenied", err)
	}

	c := dial(t, role.MakeSet(role.Operator), m.Addr())
	before := time.Now()

	if err := c.Reboot(t.Context()); err != nil {
		t.Fatalf("reboot: %v", err)
	}

	eventually(t, "rebooted", func() error {
		booted, err := bootTime(t, c)
		if err == nil && !booted.After(before) {
			err = fmt.Errorf("booted at %v, before the reboot", booted)
		}

		return err
	})
}

func TestClientCertificates(t *testing.T) {
	t.Parallel()

	cp, _ := baseConfigs(t)
	f := start(t, sim.MachineSpec{Name: "cp-1", Role: "controlplane", Config: cp})
	addr := f.Machine("cp-1").Addr()

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(bundle.Certs.OS.Crt)

	foreignCA, err := secrets.NewTalosCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}

	foreign, err := secrets.NewAdminCertificateAndKey(time.Now(), &cryptox509.PEMEncodedCertificateAndKey{Crt: foreignCA.CrtPEM, Key: foreignCA.KeyPEM}, role.MakeSet(role.Admin), time.Hour)
	if err != nil {
		t.Fatal(err)
	}

	osCA, err := cryptox509.NewCertificateAuthorityFromCertificateAndKey(bundle.Certs.OS)
	if err != nil {
		t.Fatal(err)
	}

	// apid wants exactly ClientAuth, not ClientAuth among others
	both, err := cryptox509.NewKeyPair(osCA,
		cryptox509.Organization(string(role.Admin)),
		cryptox509.KeyUsage(x509.KeyUsageDigitalSignature),
		cryptox509.ExtKeyUsage([]x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}))
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name   string
		pem    *cryptox509.PEMEncodedCertificateAndKey
		accept bool
	}{
		{"bundle admin", nil, true},
		{"foreign CA", foreign, false},
		{"extra key usage", cryptox509.NewCertificateAndKeyFromKeyPair(both), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pair := mustPair(t, role.Admin)

			if tc.pem != nil {
				if pair, err = tls.X509KeyPair(tc.pem.Crt, tc.pem.Key); err != nil {
					t.Fatal(err)
				}
			}

			c, err := client.New(t.Context(), client.WithTLSConfig(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}}), client.WithEndpoints(addr))
			if err != nil {
				t.Fatal(err)
			}

			defer c.Close() //nolint:errcheck

			if _, err := c.Version(ctxTimeout(t, 2*time.Second)); (err == nil) != tc.accept {
				t.Errorf("version: %v, want accepted %t", err, tc.accept)
			}
		})
	}

	// the server presents a certificate for its address from the bundle's CA
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{mustPair(t, role.Reader)}, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatalf("verified TLS dial: %v", err)
	}

	leaf := conn.ConnectionState().PeerCertificates[0]
	conn.Close() //nolint:errcheck

	if leaf.PublicKeyAlgorithm != x509.Ed25519 || !slices.Equal(leaf.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) || leaf.KeyUsage != x509.KeyUsageDigitalSignature {
		t.Errorf("server certificate: %s, ext key usage %v, key usage %v", leaf.PublicKeyAlgorithm, leaf.ExtKeyUsage, leaf.KeyUsage)
	}
}

func mustPair(t *testing.T, r role.Role) tls.Certificate {
	t.Helper()

	crt, err := bundle.GenerateTalosAPIClientCertificate(role.MakeSet(r))
	if err != nil {
		t.Fatal(err)
	}

	pair, err := tls.X509KeyPair(crt.Crt, crt.Key)
	if err != nil {
		t.Fatal(err)
	}

	return pair
}

func TestWatch(t *testing.T) {
	t.Parallel()

	cp, _ := baseConfigs(t)
	f := start(t, sim.MachineSpec{Name: "cp-1", Role: "controlplane", Config: cp})
	m := f.Machine("cp-1")
	c := admin(t, m.Addr())

	ctx := ctxTimeout(t, 10*time.Second)
	events := make(chan state.Event)

	if err := c.COSI.WatchKind(client.WithNode(ctx, "cp-1"), runtime.NewMachineStatus().Metadata(), events, state.WithBootstrapContents(true)); err != nil {
		t.Fatalf("watch: %v", err)
	}

	next := func() *runtime.MachineStatus {
		t.Helper()

		for {
			select {
			case ev := <-events:
				if ev.Type == state.Errored {
					t.Fatalf("watch error: %v", ev.Error)
				}

				if ms, ok := ev.Resource.(*runtime.MachineStatus); ok && ev.Type != state.Bootstrapped {
					return ms
				}
			case <-ctx.Done():
				t.Fatal("no event")
			}
		}
	}

	if ms := next(); ms.TypedSpec().Stage != runtime.MachineStageBooting {
		t.Errorf("bootstrap contents: %+v, want booting (no etcd yet)", ms.TypedSpec())
	}

	if err := c.Bootstrap(ctx, &machine.BootstrapRequest{}); err != nil {
		t.Fatalf("bootstrap: %v", err)
	}

	if ms := next(); ms.TypedSpec().Stage != runtime.MachineStageRunning {
		t.Errorf("after bootstrap: %+v, want running", ms.TypedSpec())
	}

	m.SetFaults(sim.Faults{KubeletUnhealthy: true})

	if ms := next(); !slices.ContainsFunc(ms.TypedSpec().Status.UnmetConditions, func(u runtime.UnmetCondition) bool { return u.Reason == "kubelet not healthy" }) {
		t.Errorf("after the fault: %+v, want kubelet not healthy", ms.TypedSpec().Status)
	}
}
