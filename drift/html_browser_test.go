//go:build browser

package drift_test

import (
	"context"
	"errors"
	"fmt"
	"math"
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

// wideReport is a fleet as the issue saw it: five machines on loopback
// addresses, twelve checks each, one machine unreachable.
func wideReport() *drift.Report {
	checks := []string{"config", "talos-version", "extensions", "machine-stage", "kubelet", "etcd", "storage-volumes", "storage-mounts", "storage-raw-disks", "cilium-declaration", "cilium-agent", "cilium-services"}
	var machines []drift.Machine
	for i, name := range []string{"cp-1", "cp-2", "cp-3", "worker-1", "worker-10"} {
		role := "controlplane"
		if strings.HasPrefix(name, "worker") {
			role = "worker"
		}
		machines = append(machines, drift.Machine{Name: name, Role: role, Address: fmt.Sprintf("127.0.0.1:%d", 39961+i)})
	}
	r := drift.NewReport(drift.Header{Cluster: "homelab", Inventory: "inventory.yaml", Machines: machines, GeneratedAt: time.Date(2026, 12, 5, 21, 0, 0, 0, time.UTC)})
	for _, m := range machines {
		for _, c := range checks {
			res := drift.InSync().Of(m.Name, c, drift.RungResources)
			if m.Name == "worker-10" {
				res = drift.Unknown(errors.New("talos api 127.0.0.1:39965: not reachable: connection refused (Unavailable)"), "check that worker-10 is up").Of(m.Name, c, drift.RungResources)
				res.FailClosed = c == "config"
			}
			r.Add(res)
		}
	}
	r.Finish()
	return r
}

// At 1400 px, a laptop's width, the page shows every check column with
// no details pane taking room; a click opens the pane with that result,
// the machine column stays in view (sticky) while the grid scrolls
// sideways, and closing the pane gives the grid its width back (issue 33:
// an empty pane took 40 % and only 6 of 12 columns showed).
func TestBrowserHTMLReportAt1400px(t *testing.T) {
	r := wideReport()
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
		chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true),
		chromedp.WindowSize(1400, 900),
	)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a bound for a hung browser
	defer cancel()
	var load error
	for try := 1; try <= 3; try++ { // as TestBrowserHTMLReport: Chromium's start, retried
		actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
		tctx, cancelTab := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf))
		load = chromedp.Do(tctx, chromedp.EmulateViewport(1400, 900), chromedp.Navigate("file://"+file), chromedp.WaitReady(chromedp.CSS("#grid")))
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
	if load != nil {
		t.Fatalf("load %s in Chromium: %v", file, load)
	}
	if w := evaluate[int](t, ctx, `document.documentElement.clientWidth`); w > 1400 || w < 1380 {
		t.Fatalf("viewport %d px wide, want 1400 (less a scroll bar)", w)
	}
	// inView counts the check columns whose header lies wholly inside the
	// viewport and inside the grid's scroll box (what overflows it is
	// clipped), and how many there are.
	inView := func() (shown, total int) {
		t.Helper()
		v := evaluate[[]int](t, ctx, `(function(){
			var vw=Math.min(document.documentElement.clientWidth, document.querySelector("main").getBoundingClientRect().right), n=0, ths=document.querySelectorAll("#grid thead th[data-check]");
			ths.forEach(function(th){var b=th.getBoundingClientRect(); if(th.checkVisibility() && b.left>=0 && b.right<=vw+0.5) n++;});
			return [n, ths.length];})()`)
		return v[0], v[1]
	}
	if shown, total := inView(); total != 12 || shown != total {
		t.Errorf("at 1400 px %d of %d check columns show, want all 12", shown, total)
	}
	if evaluate[bool](t, ctx, `document.getElementById("details").checkVisibility()`) {
		t.Errorf("the details pane shows before any cell is chosen")
	}
	if !evaluate[bool](t, ctx, `document.getElementById("hint").checkVisibility()`) {
		t.Errorf("no hint says to choose a cell")
	}

	// a click opens the pane with that result
	cell := `#grid a.cell[data-machine="worker-10"][data-check="config"]`
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(cell))); err != nil {
		t.Fatal(err)
	}
	id := evaluate[string](t, ctx, `document.querySelector(`+quoteJS(cell)+`).getAttribute("href").slice(1)`)
	if !evaluate[bool](t, ctx, `document.querySelector("#`+id+` .reason").checkVisibility()`) {
		t.Fatalf("clicking worker-10/config does not show its reason")
	}
	// every check column is still reachable: the grid scrolls sideways
	// and the machine column stays where it is
	scroll := evaluate[[]float64](t, ctx, `(function(){
		var main=document.querySelector("main"), th=document.querySelector("#grid tbody th"), before=th.getBoundingClientRect().left;
		main.scrollLeft=main.scrollWidth;
		var last=document.querySelector("#grid thead th[data-check]:last-child").getBoundingClientRect(), m=main.getBoundingClientRect();
		return [before, th.getBoundingClientRect().left, last.right, m.right];})()`)
	if math.Abs(scroll[0]-scroll[1]) > 1 { // a collapsed border's half pixel
		t.Errorf("the machine column moved from %v to %v px when the grid scrolled", scroll[0], scroll[1])
	}
	if scroll[2] > scroll[3]+1 {
		t.Errorf("scrolled to its end, the grid's last column ends at %v px, past the grid's edge %v px", scroll[2], scroll[3])
	}
	// closed, the grid has its width back
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#close-details"))); err != nil {
		t.Fatal(err)
	}
	if evaluate[bool](t, ctx, `document.getElementById("details").checkVisibility()`) {
		t.Errorf("the details pane still shows after Close")
	}
	evaluate[int](t, ctx, `document.querySelector("main").scrollLeft=0`)
	if shown, total := inView(); shown != total {
		t.Errorf("after Close %d of %d check columns show", shown, total)
	}
}
