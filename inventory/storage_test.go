package inventory_test

import (
	"testing"

	"devata.dev/devata/inventory"
)

func TestStorageDefaults(t *testing.T) {
	inv, err := inventory.Load("testdata/valid-full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	w := inv.Machine("w-1")
	if len(w.Mounts) != 2 || len(w.RawDisks) != 2 {
		t.Fatalf("w-1: %d mounts, %d raw disks; want 2 and 2", len(w.Mounts), len(w.RawDisks))
	}
	if !*w.Mounts[0].ReadWrite || *w.Mounts[1].ReadWrite {
		t.Errorf("mount readWrite = %t, %t; want the default true, then the given false", *w.Mounts[0].ReadWrite, *w.Mounts[1].ReadWrite)
	}
	if w.Mounts[0].Filesystem != "xfs" || w.Mounts[1].MinSize != "" {
		t.Errorf("mounts = %+v", w.Mounts)
	}
	if w.RawDisks[0].MinCount != 1 || w.RawDisks[1].MinCount != 3 {
		t.Errorf("rawDisks minCount = %d, %d; want the default 1, then 3", w.RawDisks[0].MinCount, w.RawDisks[1].MinCount)
	}
}
