package sim_test

import (
	"context"
	"fmt"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc/codes"

	"devata.dev/devata/sim"
)

// A fleet of one configured control plane and one machine in maintenance
// mode, talked to with machinery's client, then a fault.
func ExampleStart() {
	ctx := context.Background()

	bundle, _ := secrets.NewBundle(secrets.NewClock(), nil) //nolint:errcheck
	controlPlane := []byte("…a rendered controlplane config…")

	fleet, err := sim.Start(ctx, sim.Options{
		Bundle: bundle,
		Machines: []sim.MachineSpec{
			{Name: "cp-1", Role: "controlplane", Config: controlPlane},
			{Name: "w-1", Role: "worker"}, // maintenance mode
		},
		RebootDelay: 100 * time.Millisecond,
	})
	if err != nil {
		panic(err)
	}
	defer fleet.Close() //nolint:errcheck

	crt, _ := bundle.GenerateTalosAPIClientCertificate(role.MakeSet(role.Admin)) //nolint:errcheck
	cfg := clientconfig.NewConfig("sim", []string{fleet.Machine("cp-1").Addr()}, bundle.Certs.OS.Crt, crt)

	c, err := client.New(ctx, client.WithConfig(cfg))
	if err != nil {
		panic(err)
	}

	resp, err := c.Version(client.WithNodes(ctx, "cp-1", fleet.Machine("w-1").Addr()))
	fmt.Println(len(resp.GetMessages()), err) // cp-1 answers; w-1 fails: apid cannot reach a maintenance node

	fleet.Machine("cp-1").SetFaults(sim.Faults{ErrorCodes: map[string]codes.Code{"Version": codes.Internal}})
}
