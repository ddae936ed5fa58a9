package talosapi

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/client"
	coreconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/stdpatches"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	corev1 "k8s.io/api/core/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
)

// KubeComponents are the Kubernetes images a machine config runs: the
// kubelet on every machine, the control plane static pods (kube-apiserver,
// kube-controller-manager, kube-scheduler) on a control plane only.
type KubeComponents struct {
	ControlPlane                            bool
	Kubelet                                 string
	APIServer, ControllerManager, Scheduler string
}

// KubeComponentsOf reads the images from a machine config.
func KubeComponentsOf(cfg []byte) (KubeComponents, error) {
	c, err := configloader.NewFromBytes(cfg)
	if err != nil {
		return KubeComponents{}, fmt.Errorf("load config: %w", err)
	}
	if c.Machine() == nil {
		return KubeComponents{}, fmt.Errorf("the config has no machine section")
	}
	// the K8s* accessors read a Talos 1.14 Kubernetes document or, before
	// it, the v1alpha1 fields, whichever the config has
	out := KubeComponents{ControlPlane: c.Machine().Type().IsControlPlane()}
	if k := c.K8sKubeletConfig(); k != nil {
		out.Kubelet = k.Image()
	}
	if out.ControlPlane {
		if a := c.K8sAPIServerConfig(); a != nil {
			out.APIServer = a.Image()
		}
		if cm := c.K8sControllerManagerConfig(); cm != nil {
			out.ControllerManager = cm.Image()
		}
		if s := c.K8sSchedulerConfig(); s != nil {
			out.Scheduler = s.Image()
		}
	}
	return out, nil
}

// The Kubernetes components a machine config runs, as StaticPods and
// talosctl upgrade-k8s name them, in the order talosctl upgrade-k8s moves
// them to a new version (pkg/cluster/kubernetes/talos_managed.go Upgrade:
// each static pod on every control plane, then the kubelets).
const (
	KubeAPIServer         = "kube-apiserver"
	KubeControllerManager = "kube-controller-manager"
	KubeScheduler         = "kube-scheduler"
	Kubelet               = "kubelet"
)

// KubeOrder is the order in which a Kubernetes version change moves the components.
var KubeOrder = []string{KubeAPIServer, KubeControllerManager, KubeScheduler, Kubelet}

// ControlPlaneImages are the static pods' images by component name, as
// StaticPods names them (empty on a worker).
func (k KubeComponents) ControlPlaneImages() map[string]string {
	if !k.ControlPlane {
		return nil
	}
	return map[string]string{KubeAPIServer: k.APIServer, KubeControllerManager: k.ControllerManager, KubeScheduler: k.Scheduler}
}

// Image is the image of one component ("" when the machine runs none).
func (k KubeComponents) Image(component string) string {
	switch component {
	case Kubelet:
		return k.Kubelet
	case KubeAPIServer:
		return k.APIServer
	case KubeControllerManager:
		return k.ControllerManager
	case KubeScheduler:
		return k.Scheduler
	}
	return ""
}

// Versions are the distinct tags of the components' images.
func (k KubeComponents) Versions() []string {
	var out []string
	for _, img := range []string{k.Kubelet, k.APIServer, k.ControllerManager, k.Scheduler} {
		if v := ImageTag(img); v != "" && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

// ImageTag is the tag of an image reference ("v1.34.1"), "" when it has
// none (a digest only).
func ImageTag(image string) string {
	last := image[strings.LastIndex(image, "/")+1:]
	last, _, _ = strings.Cut(last, "@")
	_, tag, _ := strings.Cut(last, ":")
	return tag
}

// KubeProxy is kube-proxy, whose image the config also sets (a
// DaemonSet of the bootstrap manifests, not a component a Kubernetes
// version change moves one machine at a time).
const KubeProxy = "kube-proxy"

// kubeImagePatch is the patch that sets each component's image where cfg
// holds it, as talosctl upgrade-k8s builds it (machinery
// config/generate/stdpatches: WithKubeletImage, WithKubeAPIServerImage, …,
// with the contract stdpatches.GuessVersionContract* guesses from the
// config): the component's Talos 1.14 document (KubeletConfig,
// KubeAPIServerConfig, KubeControllerManagerConfig, KubeSchedulerConfig,
// KubeProxyConfig) when cfg has it, else its v1alpha1 field. Talos 1.14
// refuses a v1alpha1 field beside the document when it validates the
// config (machinery config/container validate.go validate, through the
// document's V1Alpha1ConflictValidate: "kubelet config is already set in
// v1alpha1 config (.machine.kubelet)", types/k8s kubelet.go, and the same
// for each component).
var kubeImagePatch = map[string]func(coreconfig.Container, string) ([]byte, error){
	Kubelet: func(c coreconfig.Container, img string) ([]byte, error) {
		return stdpatches.WithKubeletImage(stdpatches.GuessVersionContractKubelet(c), img)
	},
	KubeAPIServer: func(c coreconfig.Container, img string) ([]byte, error) {
		return stdpatches.WithKubeAPIServerImage(stdpatches.GuessVersionContractKubeAPIServer(c), img)
	},
	KubeControllerManager: func(c coreconfig.Container, img string) ([]byte, error) {
		return stdpatches.WithKubeControllerManagerImage(stdpatches.GuessVersionContractKubeControllerManager(c), img)
	},
	KubeScheduler: func(c coreconfig.Container, img string) ([]byte, error) {
		return stdpatches.WithKubeSchedulerImage(stdpatches.GuessVersionContractKubeScheduler(c), img)
	},
	KubeProxy: func(c coreconfig.Container, img string) ([]byte, error) {
		return stdpatches.WithKubeProxyImage(stdpatches.GuessVersionContractKubeProxy(c), img)
	},
}

// WithKubeImages returns cfg with the given components' images (by
// component name, KubeOrder's or KubeProxy) set where cfg holds each, as
// talosctl upgrade-k8s patches them one component at a time
// (pkg/cluster/kubernetes/talos_managed.go upgradeStaticPodPatcher,
// kubelet.go upgradeKubeletPatcher, talos_managed.go kube-proxy's patch):
// in the component's document on a Talos 1.14 config that has one, in the
// v1alpha1 field otherwise (see kubeImagePatch).
func WithKubeImages(cfg []byte, images map[string]string) ([]byte, error) {
	if len(images) == 0 {
		return cfg, nil
	}
	for c := range images {
		if kubeImagePatch[c] == nil {
			return nil, fmt.Errorf("set images: unknown component %q among %v", c, slices.Sorted(maps.Keys(images)))
		}
	}
	c, err := configloader.NewFromBytes(cfg)
	if err != nil {
		return nil, fmt.Errorf("set the Kubernetes images: load config: %w", err)
	}
	var patches []configpatcher.Patch
	for _, comp := range append(slices.Clone(KubeOrder), KubeProxy) {
		img, ok := images[comp]
		if !ok {
			continue
		}
		p, err := stdpatches.PreparePatch(kubeImagePatch[comp](c, img))
		if err != nil {
			return nil, fmt.Errorf("%s image patch: %w", comp, err)
		}
		patches = append(patches, p)
	}
	out, err := configpatcher.Apply(configpatcher.WithBytes(cfg), patches)
	if err != nil {
		return nil, fmt.Errorf("set the Kubernetes images: %w", err)
	}
	return out.Bytes()
}

// StaticPod is one control plane static pod as the machine's kubelet
// reports it (the StaticPodStatus resource).
type StaticPod struct {
	// Component is the pod's k8s-app: kube-apiserver, kube-controller-manager, kube-scheduler.
	Component string
	Image     string
	Ready     bool
	// Reason says why it is not Ready, from its Ready condition.
	Reason string
}

// StaticPods reads the machine's StaticPodStatus resources (Talos' view of
// the kubelet's static pods: `kube-system/<component>-<node>`).
func StaticPods(ctx context.Context, c *client.Client) ([]StaticPod, error) {
	list, err := safe.StateListAll[*k8s.StaticPodStatus](ctx, c.COSI)
	if err != nil {
		return nil, fmt.Errorf("read StaticPodStatus: %w", PlainError(err))
	}
	var out []StaticPod
	for r := range list.All() {
		var st corev1.PodStatus
		if err := kruntime.DefaultUnstructuredConverter.FromUnstructured(r.TypedSpec().PodStatus, &st); err != nil {
			return nil, fmt.Errorf("StaticPodStatus %s: %w", r.Metadata().ID(), err)
		}
		p := StaticPod{Reason: "no Ready condition"}
		if len(st.ContainerStatuses) > 0 {
			p.Component, p.Image = st.ContainerStatuses[0].Name, st.ContainerStatuses[0].Image
		}
		for _, cond := range st.Conditions {
			if cond.Type == corev1.PodReady {
				p.Ready, p.Reason = cond.Status == corev1.ConditionTrue, cond.Reason
				if cond.Message != "" {
					p.Reason += ": " + cond.Message
				}
			}
		}
		out = append(out, p)
	}
	return out, nil
}
