package sim

import (
	"crypto/sha256"
	"fmt"
)

// bootID is the machine's boot ID in this boot: the kernel makes a random
// UUID at every boot (/proc/sys/kernel/random/boot_id), which the kubelet
// reports as its Node's status.nodeInfo.bootID (kubernetes
// pkg/kubelet/nodestatus/setters.go MachineInfo, from cadvisor's
// MachineInfo.BootID) and Talos' own integration suites wait on to see a
// reboot (v1.11.0 internal/integration/base/api.go ReadBootID reads the
// file through MachineService.Read; v1.14.1 reads the runtime BootID
// resource). Here it is derived
// from the machine's name and the time it booted, so it changes with every
// boot and nothing else.
func (s snapshot) bootID() string {
	h := sha256.Sum256(fmt.Appendf(nil, "%s/%d", s.name, s.booted.UnixNano()))
	h[6] = h[6]&0x0f | 0x40 // version 4, as the kernel's
	h[8] = h[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}
