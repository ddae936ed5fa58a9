package reconcile_test

import (
	"net/http"
	"strings"
	"testing"

	"devata.dev/devata/reconcile"
)

// Before any pass, every known pass result, error stage and action is a
// series at 0: increase() over a counter that appears at 1 sees nothing,
// so an alert on the first blocked pass or the first error would miss it.
func TestMetricsStartAtZero(t *testing.T) {
	code, text := scrape(t, reconcile.NewMetrics(), "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	var want []string
	for _, result := range []string{"ok", "blocked", "inventory-invalid", "interrupted"} {
		want = append(want, `devata_reconcile_passes_total{result="`+result+`"} 0`)
	}
	for _, stage := range []string{"inventory", "observe", "plan", "apply", "gate", "audit"} {
		want = append(want, `devata_reconcile_errors_total{stage="`+stage+`"} 0`)
	}
	for _, kind := range []string{"apply", "upgrade", "join", "sync-bootstrap-manifests"} {
		for _, result := range []string{"converged", "failed", "blocked", "interrupted", "dry-run", "abandoned"} {
			want = append(want, `devata_reconcile_actions_total{kind="`+kind+`",result="`+result+`"} 0`)
		}
	}
	lines := strings.Split(text, "\n")
	for _, w := range want {
		found := false
		for _, l := range lines {
			found = found || l == w
		}
		if !found {
			t.Errorf("a fresh /metrics lacks %s", w)
		}
	}
}
