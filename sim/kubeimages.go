package sim

import (
	"fmt"

	"github.com/hashicorp/go-multierror"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/compatibility"
	"github.com/siderolabs/talos/pkg/machinery/config/config"
)

// kubernetesImages refuses Kubernetes images the machine's own Talos does
// not run, as each Talos does on apply: v1.11.0's RuntimeValidate
// (machinery v1alpha1_validation.go) and, from 1.14, Validate
// (ValidateKubernetesVersions, and each Kube*Config document's Validate)
// call compatibility.ValidateKubernetesImageTag, which judges the tag
// against the running Talos (version.NewVersion). In one process the sim
// plays machines of several versions, so machinery's own check, which
// reads the process-wide version.Tag, is skipped (validation.WithLocal)
// and this one judges by the machine's version, in the same words.
func kubernetesImages(cfg config.Config, talos string) error {
	tv, err := compatibility.ParseTalosVersion(&machine.VersionInfo{Tag: talos})
	if err != nil {
		return fmt.Errorf("failed to parse Talos version: %w", err)
	}

	check := func(name, ref string) error {
		kv, err := compatibility.KubernetesVersionFromImageRef(ref)
		if err != nil {
			return fmt.Errorf("%s image is not valid: failed to parse Kubernetes version from image reference %q: %w", name, ref, err)
		}

		if err := kv.SupportedWith(tv); err != nil {
			return fmt.Errorf("%s image is not valid: %w", name, err)
		}

		return nil
	}

	var result *multierror.Error

	if k := cfg.K8sKubeletConfig(); k != nil && cfg.Machine() != nil {
		result = multierror.Append(result, check("kubelet", k.Image()))
	}

	if cfg.Machine() != nil && cfg.Machine().Type().IsControlPlane() && cfg.Cluster() != nil {
		result = multierror.Append(result,
			check("kube-apiserver", cfg.K8sAPIServerConfig().Image()),
			check("kube-controller-manager", cfg.K8sControllerManagerConfig().Image()),
			check("kube-scheduler", cfg.K8sSchedulerConfig().Image()),
		)
	}

	return result.ErrorOrNil() // Append leaves nil errors out
}
