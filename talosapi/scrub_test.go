package talosapi_test

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc/codes"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/sim"
	"devata.dev/devata/talosapi"
)

// What Talos answers to an apply that fails quotes the config (issue 15):
// a change that cannot be applied without a reboot comes back with an
// unredacted diff of the running config against the new one, and
// machinery's validation quotes a malformed WireGuard key whole. The sim
// answers as machined does; the error devata passes on keeps the message's
// shape and its gRPC code, and none of the secrets of either config.
func TestApplyErrorsHoldNoSecrets(t *testing.T) {
	tf := simtest.Start(t, simtest.Options{Bootstrap: true})
	ctx := context.Background()
	w := tf.Inventory.Machine("worker-1")
	c, err := tf.Dialer.Client(ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	running := simtest.Patch(t, tf.Desired["worker-1"], "machine:\n  env:\n    https_proxy: http://admin:0ld-proxy-pass@proxy.lan:3128\n    API_TOKEN: 0ld-api-token-value\n")
	tf.Sim.Machine("worker-1").SetFaults(sim.Faults{DriftedConfig: running})
	wanted := simtest.Patch(t, tf.Desired["worker-1"], "machine:\n  env:\n    https_proxy: http://admin:s3cret-proxy-pass@proxy.lan:3128\n    API_TOKEN: s3cret-api-token-value\n")
	wgKey := base64.StdEncoding.EncodeToString([]byte("s3cret-wg-key-16"))
	badKey := simtest.Patch(t, tf.Desired["worker-1"], "machine:\n  network:\n    interfaces:\n      - interface: wg0\n        wireguard:\n          privateKey: "+wgKey+"\n")

	secrets := []string{"0ld-proxy-pass", "0ld-api-token-value", "s3cret-proxy-pass", "s3cret-api-token-value", wgKey}
	for _, k := range [][]byte{tf.Bundle.Certs.OS.Key, tf.Bundle.Certs.K8s.Key} {
		secrets = append(secrets, base64.StdEncoding.EncodeToString(k))
	}
	secrets = append(secrets, tf.Bundle.TrustdInfo.Token, tf.Bundle.Secrets.BootstrapToken)

	for _, tc := range []struct {
		name string
		call func() error
		want []string
	}{
		{
			name: "dry run no-reboot",
			call: func() error { _, err := talosapi.DryRun(ctx, c, wanted, talosapi.ModeNoReboot); return err },
			want: []string{"this config change can't be applied in immediate mode", "immediate mode (Talos' diff not shown", "(InvalidArgument)"},
		},
		{
			name: "apply try",
			call: func() error { _, err := talosapi.Apply(ctx, c, wanted, talosapi.ModeTry, 0); return err },
			want: []string{"this config change can't be applied in immediate mode", "immediate mode (Talos' diff not shown"},
		},
		{
			name: "dry run of a config with a malformed WireGuard key",
			call: func() error { _, err := talosapi.DryRun(ctx, c, badKey, talosapi.ModeAuto); return err },
			want: []string{`private key is invalid: wrong key "******" length: 16`, "(InvalidArgument)"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if err == nil {
				t.Fatal("the sim accepted it: the test would prove nothing")
			}
			if code := client.StatusCode(err); code != codes.InvalidArgument {
				t.Errorf("code %s, want InvalidArgument: scrubbing must keep the gRPC code", code)
			}
			msg := err.Error()
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error lacks %q:\n%s", w, msg)
				}
			}
			for _, s := range secrets {
				if strings.Contains(msg, s) {
					t.Errorf("error holds secret %.16q…:\n%s", s, msg)
				}
			}
			// nothing underneath either: %+v, unwrapping and the status all scrubbed
			if st := client.Status(err); st != nil {
				for _, s := range secrets {
					if strings.Contains(st.Message(), s) {
						t.Errorf("the error's gRPC status holds secret %.16q…", s)
					}
				}
			}
		})
	}
}
