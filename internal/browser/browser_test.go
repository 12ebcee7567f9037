package browser_test

import (
	"bytes"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/linkgate/linkgate/internal/browser"
)

func TestMain(m *testing.M) { os.Exit(browser.Run(m)) }

const page = `<!doctype html><meta name="viewport" content="width=device-width">
<body style="margin:0"><div id="pad" style="width:100px;height:100px;background:#08f"></div><a id="dl">download</a>
<script>
const seen = [];
document.getElementById("pad").addEventListener("pointerdown", e => seen.push(e.pointerType));
document.getElementById("dl").addEventListener("click", () => {
  const a = document.createElement("a");
  a.href = URL.createObjectURL(new Blob(["a,b\n1,2\n"], {type: "text/csv"}));
  a.download = "x.csv"; document.body.append(a); a.click();
});
document.body.dataset.tz = Intl.DateTimeFormat().resolvedOptions().timeZone;
document.body.dataset.state = "ready";
</script>`

// TestPage: the shared browser opens a page at a phone's size in a zone,
// evaluates script, taps with a finger, downloads a file and takes a
// screenshot of the viewport's size.
func TestPage(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(page)) }))
	defer srv.Close()
	dir := t.TempDir()
	p := browser.Shared(t).NewPage(t, browser.Options{Width: 390, Height: 844, Mobile: true, TimeZone: "America/New_York", DownloadDir: dir})
	p.Navigate(srv.URL)
	p.WaitFor(10*time.Second, "the page's script", `document.body.dataset.state === "ready"`)
	var got struct {
		TZ    string
		Width int
	}
	p.Eval(`({tz: document.body.dataset.tz, width: innerWidth})`, &got)
	if got.TZ != "America/New_York" || got.Width != 390 {
		t.Errorf("zone %q, width %d; want America/New_York, 390", got.TZ, got.Width)
	}
	p.Tap(50, 50)
	var seen []string
	p.WaitFor(5*time.Second, "the tap", `seen.length > 0`)
	p.Eval(`seen`, &seen)
	if len(seen) != 1 || seen[0] != "touch" {
		t.Errorf("pointer events %q, want one touch", seen)
	}
	p.ClickSelector("#dl")
	f := p.Download(dir, 10*time.Second)
	if b, err := os.ReadFile(f); err != nil || string(b) != "a,b\n1,2\n" {
		t.Errorf("download %s: %q %v", f, b, err)
	}
	img, err := png.Decode(bytes.NewReader(p.Screenshot()))
	if err != nil || img.Bounds().Dx() != 390 || img.Bounds().Dy() != 844 {
		t.Errorf("screenshot: %v %v, want 390 × 844", err, img.Bounds())
	}
	if errs := p.Errors(); len(errs) > 0 {
		t.Errorf("page errors: %q", errs)
	}
}
