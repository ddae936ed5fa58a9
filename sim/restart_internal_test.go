package sim

import (
	"maps"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
)

var restartBundle = sync.OnceValues(func() (*secrets.Bundle, error) {
	return secrets.NewBundle(secrets.NewFixedClock(time.Now()), config.TalosVersion1_13)
})

// generated renders a config of the given type for the contract of a Talos
// release: up to 1.13 Kubernetes lives in the v1alpha1 document, from 1.14
// in documents of its own (KubeletConfig, KubeNodeConfig, …).
func generated(t *testing.T, contract *config.VersionContract, typ machine.Type) []byte {
	t.Helper()

	b, err := restartBundle()
	if err != nil {
		t.Fatal(err)
	}

	in, err := generate.NewInput("sim", "https://10.20.0.10:6443", "1.34.1",
		generate.WithSecretsBundle(b), generate.WithVersionContract(contract), generate.WithInstallDisk("/dev/sda"))
	if err != nil {
		t.Fatal(err)
	}

	cfg, err := in.Config(typ)
	if err != nil {
		t.Fatal(err)
	}

	data, err := cfg.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	if err != nil {
		t.Fatal(err)
	}

	return data
}

func load(t *testing.T, data []byte) config.Provider {
	t.Helper()

	p, err := configloader.NewFromBytes(data)
	if err != nil {
		t.Fatalf("load config: %v", err)
	}

	return p
}

// patched applies a strategic merge patch, or appends documents.
func patched(t *testing.T, data []byte, patch string) []byte {
	t.Helper()

	ps, err := configpatcher.LoadPatches([]string{patch})
	if err != nil {
		t.Fatal(err)
	}

	out, err := configpatcher.Apply(configpatcher.WithBytes(data), ps)
	if err != nil {
		t.Fatalf("patch: %v", err)
	}

	b, err := out.Bytes()
	if err != nil {
		t.Fatal(err)
	}

	return b
}

// The same settings written in the v1alpha1 document or in 1.14's
// documents derive the same KubeletSpec and static pod specs, so a live
// apply from one shape to the other restarts nothing on Talos (kubelet
// controllers react to the derived resources, COSI writes no unchanged
// resource): a machine installed from an older medium keeps its kubelet
// when devata applies the 1.14 shape. Each pair differs in its raw
// v1alpha1 fields, which the sim once compared.
func TestSameSettingsInEitherDocumentShapeRestartNothing(t *testing.T) {
	t.Parallel()

	oldWorker := generated(t, config.TalosVersion1_13, machine.TypeWorker)
	oldCP := generated(t, config.TalosVersion1_13, machine.TypeControlPlane)

	for _, tc := range []struct {
		name         string
		current      []byte
		next         []byte
		wantRestarts []string
	}{
		{
			name:    "a worker: the 1.13 shape, then the 1.14 shape of the same settings",
			current: oldWorker,
			next:    generated(t, config.TalosVersion1_14, machine.TypeWorker),
		},
		{
			name:    "a control plane: machine.kubelet moved into a KubeletConfig document",
			current: oldCP,
			next: patched(t, patched(t, oldCP, "machine:\n  kubelet:\n    $patch: delete\n"),
				"apiVersion: v1alpha1\nkind: KubeletConfig\nimage: ghcr.io/siderolabs/kubelet:v1.34.1\ndefaultRuntimeSeccompProfileEnabled: true\n"),
		},
		{
			// 1.14's contract also turns on settings 1.13's lacks (startup
			// probes, an authentication config, the ca-roots volume): the
			// static pods restart, as they would on Talos; the kubelet not
			name:         "a control plane: the 1.13 shape, then the 1.14 shape",
			current:      oldCP,
			next:         generated(t, config.TalosVersion1_14, machine.TypeControlPlane),
			wantRestarts: []string{apiServerPod, controllerPod, schedulerPod},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			cur, next := load(t, tc.current), load(t, tc.next)
			if reflect.DeepEqual(cur.RawV1Alpha1().MachineConfig.MachineKubelet, next.RawV1Alpha1().MachineConfig.MachineKubelet) {
				t.Fatal("the two configs' machine.kubelet are equal: the pair tests nothing")
			}

			got := restartsOf(cur, next)
			if keys := slices.Sorted(maps.Keys(got)); !reflect.DeepEqual(keys, tc.wantRestarts) {
				t.Errorf("restarts %v, want %v", got, tc.wantRestarts)
			}
		})
	}
}

// A real change restarts what derives from it and nothing else: the
// kubelet's extraArgs (in either shape) the kubelet, with the image it ran
// before; the API server's extraArgs its static pod.
func TestARealChangeRestartsWhatDerivesFromIt(t *testing.T) {
	t.Parallel()

	newWorker := generated(t, config.TalosVersion1_14, machine.TypeWorker)
	oldCP := generated(t, config.TalosVersion1_13, machine.TypeControlPlane)

	for _, tc := range []struct {
		name    string
		current []byte
		patch   string
		want    map[string]string
	}{
		{
			name:    "kubelet extraArgs in a KubeletConfig document",
			current: newWorker,
			patch:   "apiVersion: v1alpha1\nkind: KubeletConfig\nextraArgs:\n  max-pods: \"150\"\n",
			want:    map[string]string{kubeletComponent: "ghcr.io/siderolabs/kubelet:v1.34.1"},
		},
		{
			name:    "kubelet extraArgs in the v1alpha1 document",
			current: oldCP,
			patch:   "machine:\n  kubelet:\n    extraArgs:\n      max-pods: \"150\"\n",
			want:    map[string]string{kubeletComponent: "ghcr.io/siderolabs/kubelet:v1.34.1"},
		},
		{
			name:    "a new kubelet image",
			current: oldCP,
			patch:   "machine:\n  kubelet:\n    image: ghcr.io/siderolabs/kubelet:v1.34.2\n",
			want:    map[string]string{kubeletComponent: "ghcr.io/siderolabs/kubelet:v1.34.1"},
		},
		{
			name:    "API server extraArgs",
			current: oldCP,
			patch:   "cluster:\n  apiServer:\n    extraArgs:\n      event-ttl: 2h\n",
			want:    map[string]string{apiServerPod: "registry.k8s.io/kube-apiserver:v1.34.1"},
		},
		{
			name:    "the scheduler's image",
			current: oldCP,
			patch:   "cluster:\n  scheduler:\n    image: registry.k8s.io/kube-scheduler:v1.34.2\n",
			want:    map[string]string{schedulerPod: "registry.k8s.io/kube-scheduler:v1.34.1"},
		},
		{
			name:    "a setting neither reads (machine.sysctls)",
			current: oldCP,
			patch:   "machine:\n  sysctls:\n    vm.max_map_count: \"262144\"\n",
			want:    map[string]string{},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			got := restartsOf(load(t, tc.current), load(t, patched(t, tc.current, tc.patch)))
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("restarts %v, want %v", got, tc.want)
			}
		})
	}
}
