package simtest

import (
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
)

// Patch applies one machinery config patch (strategic merge or JSON 6902)
// to cfg and encodes the result without comments, as devata renders.
func Patch(t testing.TB, cfg []byte, patch string) []byte {
	t.Helper()
	p, err := configpatcher.LoadPatch([]byte(patch))
	if err != nil {
		t.Fatal(err)
	}
	c, err := configloader.NewFromBytes(cfg)
	if err != nil {
		t.Fatal(err)
	}
	out, err := configpatcher.Apply(configpatcher.WithConfig(c), []configpatcher.Patch{p})
	if err != nil {
		t.Fatal(err)
	}
	pc, err := out.Config()
	if err != nil {
		t.Fatal(err)
	}
	data, err := pc.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	if err != nil {
		t.Fatal(err)
	}
	return data
}
