package sim

import (
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
)

// securityState is runtime.SecurityState, which machined's
// SecurityStateController writes once machined runs, on every boot,
// maintenance mode included (talos v1.14.1 and v1.11.0
// controllers/runtime/security_state.go Run). The sim's machine is a metal
// one booted by GRUB without Secure Boot: SecureBoot and BootedWithUKI
// false (no EFI variables say otherwise), no PCR signing key, SELinux
// permissive (kernel.DefaultArgs has selinux=1 and no enforcing=1), FIPS
// disabled, module signatures not enforced. Talos' API integration suites
// wait for it before anything else (internal/integration/base/api.go
// Capabilities). A reboot does not change it, so the sim keeps it.
func securityState() resource.Resource {
	st := runtime.NewSecurityStateSpec(runtime.NamespaceName)
	spec := st.TypedSpec()
	spec.SecureBoot = false
	spec.BootedWithUKI = false
	spec.SELinuxState = runtime.SELinuxStatePermissive
	spec.FIPSState = runtime.FIPSStateDisabled

	return st
}
