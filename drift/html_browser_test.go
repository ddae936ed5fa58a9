//go:build browser

package drift_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"devata.dev/devata/drift"
)

// chromium finds the browser, or fails naming the package that provides it:
// a browser test that cannot run a browser proves nothing, so it never skips.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("DEVATA_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no Chromium on PATH (looked for chromium, chromium-browser, google-chrome, headless-shell): " +
		"install the Debian package with `apt-get install -y chromium`, or set DEVATA_CHROMIUM to a Chrome binary")
	return ""
}

// The HTML page in a real headless Chromium, loaded from file:// under its
// own Content-Security-Policy: one cell per result, a click shows the
// result's reason, and the filters hide what they filter, as the browser
// computes visibility.
func TestBrowserHTMLReport(t *testing.T) {
	r := provenanceReport(true, fixtureProvenance)
	file := filepath.Join(t.TempDir(), "report.html")
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := drift.WriteHTML(f, r); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.NoSandbox, // CI runs as root
		chromedp.Flag("disable-gpu", true),
	)
	// A bound for a hung browser, not a timing assertion.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Chromium, started on a loaded CI machine, now and then exits before
	// it listens ("chrome failed to start", a crashpad dump): that is the
	// browser's start, not the report, so it is started again (three
	// tries); every other error fails the test.
	var load error
	for try := 1; try <= 3; try++ {
		actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
		tctx, cancelTab := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf))
		load = chromedp.Do(tctx, chromedp.Navigate("file://"+file), chromedp.WaitReady(chromedp.CSS("#grid")))
		if load == nil || !strings.Contains(load.Error(), "chrome failed to start") {
			defer cancelAlloc()
			defer cancelTab()
			ctx = tctx
			break
		}
		t.Logf("try %d: %v", try, load)
		cancelTab()
		cancelAlloc()
	}

	click := func(selector string) {
		t.Helper()
		if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(selector))); err != nil {
			t.Fatalf("click %s: %v", selector, err)
		}
	}
	if load != nil {
		t.Fatalf("load %s in Chromium: %v", file, load)
	}

	// The script ran (the CSP's hash admitted it): the body has its class.
	scripted := evaluate[bool](t, ctx, `document.body.classList.contains("js")`)
	if !scripted {
		t.Fatalf("the page's script did not run in Chromium (does the CSP's hash match it?)")
	}

	cells := evaluate[int](t, ctx, `document.querySelectorAll("#grid a.cell").length`)
	if cells != len(r.Results) {
		t.Errorf("%d cells in the grid, want one per result (%d)", cells, len(r.Results))
	}

	// Before a click no details show; after one, that result's and only it.
	visible := func(selector string) bool {
		t.Helper()
		return evaluate[bool](t, ctx, `(function(){var e=document.querySelector(`+quoteJS(selector)+`); if(!e) throw new Error("no "+`+quoteJS(selector)+`); return e.checkVisibility();})()`)
	}
	drifted := `#grid a.cell[data-machine="cp-2"][data-check="config"]`
	id := evaluate[string](t, ctx, `document.querySelector(`+quoteJS(drifted)+`).getAttribute("href").slice(1)`)
	if visible("#" + id + " .reason") {
		t.Errorf("a result's details show before any click")
	}
	click(drifted)
	if !visible("#" + id + " .reason") {
		t.Fatalf("clicking cp-2/config does not show its reason")
	}
	reason := evaluate[string](t, ctx, `document.querySelector("#`+id+` .reason").innerText`)
	if want := "applied config differs from the rendered one: +2 -2 lines"; reason != want {
		t.Errorf("shown reason %q, want %q", reason, want)
	}
	if !visible("#"+id+" pre.diff") || !visible("#"+id+" .next") {
		t.Errorf("cp-2/config's diff or next step is not shown")
	}
	if !visible("#" + id + " ul.changes") {
		t.Errorf("cp-2/config's changes by path are not shown")
	}
	changes := evaluate[string](t, ctx, `document.querySelector("#`+id+` ul.changes").innerText`)
	if want := "machine.kubelet.image: \"ghcr.io/siderolabs/kubelet:v1.34.0\" → \"ghcr.io/siderolabs/kubelet:v1.34.1\"\nmachine.network.hostname: \"cp-2-old\" → \"cp-2\""; changes != want {
		t.Errorf("shown changes %q, want %q", changes, want)
	}
	open := evaluate[int](t, ctx, `Array.from(document.querySelectorAll("section.detail")).filter(function(e){return e.checkVisibility();}).length`)
	if open != 1 {
		t.Errorf("%d details sections show after one click, want 1", open)
	}

	// Unticking InSync hides every InSync cell, cp-1's row (all in sync)
	// and the storage-mounts column (in sync wherever it ran); the others stay.
	click(`#filters input[name="status"][value="InSync"]`)
	counts := evaluate[struct{ InSyncShown, OthersHidden, Others int }](t, ctx, `(function(){
		var c={InSyncShown:0,OthersHidden:0,Others:0};
		document.querySelectorAll("#grid a.cell").forEach(function(e){
			if(e.dataset.status==="InSync"){ if(e.checkVisibility()) c.InSyncShown++; }
			else { c.Others++; if(!e.checkVisibility()) c.OthersHidden++; }
		});
		return c;})()`)
	if counts.InSyncShown != 0 || counts.OthersHidden != 0 || counts.Others != 4 {
		t.Errorf("with InSync unticked: %d InSync cells shown, %d of %d others hidden; want 0, 0 of 4", counts.InSyncShown, counts.OthersHidden, counts.Others)
	}
	if visible(`#grid tr[data-machine="cp-1"]`) || visible(`#grid tr[data-machine="worker-2"]`) {
		t.Errorf("the rows of machines all in sync still show")
	}
	if !visible(`#grid tr[data-machine="cp-2"]`) || !visible(`#grid tr[data-machine="worker-1"]`) || !visible(`#grid tr[data-machine="worker-10"]`) {
		t.Errorf("rows of drifted or unknown machines are hidden")
	}
	if visible(`#grid thead th[data-check="storage-mounts"]`) {
		t.Errorf("the storage-mounts column (InSync only) still shows")
	}
	shown := evaluate[string](t, ctx, `document.getElementById("shown").textContent`)
	if shown != "showing 4 of 14 results" {
		t.Errorf("count line %q", shown)
	}

	// Unticking the reconciliation rung hides the config and version cells.
	click(`#filters input[name="rung"][value="reconciliation"]`)
	if visible(drifted) || !visible(`#grid a.cell[data-machine="cp-2"][data-check="kubelet"]`) {
		t.Errorf("the rung filter does not hide reconciliation cells alone")
	}
	// Ticking both again brings every cell back.
	click(`#filters input[name="rung"][value="reconciliation"]`)
	click(`#filters input[name="status"][value="InSync"]`)
	all := evaluate[int](t, ctx, `Array.from(document.querySelectorAll("#grid a.cell")).filter(function(e){return e.checkVisibility();}).length`)
	if all != len(r.Results) {
		t.Errorf("%d cells show with every filter ticked, want %d", all, len(r.Results))
	}
}

// evaluate runs a JavaScript expression in the page and decodes its value.
func evaluate[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// quoteJS quotes a selector made in this test as a JavaScript string.
func quoteJS(s string) string {
	b := []byte{'\''}
	for i := 0; i < len(s); i++ {
		if s[i] == '\'' || s[i] == '\\' {
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return string(append(b, '\''))
}
