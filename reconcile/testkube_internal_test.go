package reconcile

import (
	"testing"

	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/internal/testenv"
)

// StartTestKube starts a real kube-apiserver and etcd (internal/testenv)
// with apiServerArgs among the API server's flags, stopped when the test
// ends, and returns it with a clientset as system:masters. Exported from
// a test file so that the tests of both this package and reconcile_test
// set up their API server alike.
func StartTestKube(t *testing.T, apiServerArgs map[string]string) (*testenv.Env, *kubernetes.Clientset) {
	t.Helper()
	env := testenv.StartWith(t, testenv.Options{APIServerArgs: apiServerArgs})
	kc, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return env, kc
}
