package machines

import "devata.dev/devata/checks/target"

// SetBoot gives t the installer w, as if read from an inventory.
func SetBoot(t *target.Target, w WantBoot) *target.Target {
	target.Set(t, bootKey{}, w)
	return t
}
