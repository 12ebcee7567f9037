// Package browser drives a headless Chromium through the DevTools protocol
// for the tests of the pages the gateway serves: one browser process per
// test binary (Shared), a page per test in a browser context of its own
// (separate storage, downloads and viewport), and what a person does with
// a page: open it at a size, read its DOM, tap, click, download, take a
// screenshot.
//
// The protocol runs over a pipe (--remote-debugging-pipe: the browser reads
// commands on its fd 3 and writes answers and events on fd 4, each a JSON
// message ended by a NUL byte), so no port is opened and nothing but the
// test can drive the browser. Sessions are flat (Target.attachToTarget
// with flatten): one connection, a sessionId per page.
package browser

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/linkgate/linkgate/internal/testkit"
)

// Args are the flags of a closed-network headless run: no sandbox (tests
// may run as root), no GPU, no background traffic of the browser's own.
var Args = []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
	"--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
	"--disable-dev-shm-usage", "--disable-default-apps", "--disable-extensions", "--mute-audio",
	"--hide-scrollbars", "--font-render-hinting=none"}

// Find returns the path of a Chromium on PATH, or "".
func Find() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// Browser is a running Chromium. Its methods are safe for concurrent use.
type Browser struct {
	cmd  *exec.Cmd
	in   *os.File // our end of the browser's fd 3
	out  *os.File // our end of the browser's fd 4
	dir  string   // its user data dir, removed by Close
	wmu  sync.Mutex
	next atomic.Int64

	mu      sync.Mutex
	pending map[int64]chan reply
	subs    map[string][]chan event // by sessionId ("" for the browser's own)
	err     error                   // the connection's end
	done    chan struct{}
}

type reply struct {
	Result json.RawMessage
	Err    *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
}

type event struct {
	Method string
	Params json.RawMessage
}

// Start runs the Chromium at bin, headless, with a fresh user data dir.
func Start(bin string, extra ...string) (*Browser, error) {
	dir, err := os.MkdirTemp("", "linkgate-chromium")
	if err != nil {
		return nil, err
	}
	cmdR, cmdW, err := os.Pipe() // we write commands, it reads fd 3
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe() // it writes fd 4, we read
	if err != nil {
		return nil, err
	}
	args := append(append(append([]string{}, Args...), "--user-data-dir="+dir, "--remote-debugging-pipe"), extra...)
	args = append(args, "about:blank")
	cmd := exec.Command(bin, args...)
	cmd.ExtraFiles = []*os.File{cmdR, outW}
	// The browser dies with the test binary, whatever way it ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("browser: start %s: %w", bin, err)
	}
	cmdR.Close()
	outW.Close()
	b := &Browser{cmd: cmd, in: cmdW, out: outR, dir: dir, pending: map[int64]chan reply{},
		subs: map[string][]chan event{}, done: make(chan struct{})}
	go b.read()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := b.call(ctx, "", "Browser.getVersion", nil); err != nil {
		b.Close()
		return nil, fmt.Errorf("browser: %s does not answer on its pipe: %w", bin, err)
	}
	return b, nil
}

// read dispatches the browser's messages until the pipe closes.
func (b *Browser) read() {
	r := bufio.NewReaderSize(b.out, 1<<20)
	var err error
	for {
		var msg []byte
		msg, err = r.ReadBytes(0)
		if err != nil {
			break
		}
		var m struct {
			ID        int64           `json:"id"`
			Method    string          `json:"method"`
			Params    json.RawMessage `json:"params"`
			SessionID string          `json:"sessionId"`
			Result    json.RawMessage `json:"result"`
			Error     *struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(msg[:len(msg)-1], &m) != nil {
			continue
		}
		b.mu.Lock()
		if m.ID != 0 {
			if ch, ok := b.pending[m.ID]; ok {
				delete(b.pending, m.ID)
				ch <- reply{Result: m.Result, Err: m.Error}
			}
		} else {
			for _, ch := range b.subs[m.SessionID] {
				select {
				case ch <- event{m.Method, m.Params}:
				default: // a subscriber that does not keep up misses events
				}
			}
		}
		b.mu.Unlock()
	}
	b.mu.Lock()
	b.err = fmt.Errorf("browser: the DevTools pipe closed: %w", err)
	for id, ch := range b.pending {
		delete(b.pending, id)
		close(ch)
	}
	b.mu.Unlock()
	close(b.done)
}

// call sends a command (to the page of session, or to the browser for "")
// and returns its result.
func (b *Browser) call(ctx context.Context, session, method string, params any) (json.RawMessage, error) {
	id := b.next.Add(1)
	msg := map[string]any{"id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	if session != "" {
		msg["sessionId"] = session
	}
	data, err := json.Marshal(msg)
	if err != nil {
		return nil, err
	}
	ch := make(chan reply, 1)
	b.mu.Lock()
	if b.err != nil {
		b.mu.Unlock()
		return nil, b.err
	}
	b.pending[id] = ch
	b.mu.Unlock()
	b.wmu.Lock()
	_, err = b.in.Write(append(data, 0))
	b.wmu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("browser: %s: %w", method, err)
	}
	select {
	case r, ok := <-ch:
		if !ok {
			return nil, b.err
		}
		if r.Err != nil {
			return nil, fmt.Errorf("browser: %s: %s (%d)", method, r.Err.Message, r.Err.Code)
		}
		return r.Result, nil
	case <-ctx.Done():
		b.mu.Lock()
		delete(b.pending, id)
		b.mu.Unlock()
		return nil, fmt.Errorf("browser: %s: %w", method, ctx.Err())
	}
}

// subscribe returns a channel of the events of session.
func (b *Browser) subscribe(session string) chan event {
	ch := make(chan event, 1024)
	b.mu.Lock()
	b.subs[session] = append(b.subs[session], ch)
	b.mu.Unlock()
	return ch
}

func (b *Browser) unsubscribe(session string) {
	b.mu.Lock()
	for _, ch := range b.subs[session] {
		close(ch)
	}
	delete(b.subs, session)
	b.mu.Unlock()
}

// Close ends the browser and removes its user data dir.
func (b *Browser) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	b.call(ctx, "", "Browser.close", nil)
	cancel()
	b.in.Close()
	done := make(chan error, 1)
	go func() { done <- b.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	b.out.Close()
	return os.RemoveAll(b.dir)
}

var shared struct {
	once sync.Once
	b    *Browser
	err  error
}

// Shared returns the test binary's browser, started on first use, or skips
// t loudly when there is no Chromium. CloseShared (from TestMain) ends it;
// without it the browser still dies with the test binary.
func Shared(t testing.TB) *Browser {
	t.Helper()
	bin := Find()
	if bin == "" {
		t.Skip("SKIPPED: no chromium on PATH: the page was NOT driven in a browser (apt-get install -y chromium; test.sh installs it)")
	}
	shared.once.Do(func() { shared.b, shared.err = Start(bin) })
	if shared.err != nil {
		t.Fatalf("chromium: %v", shared.err)
	}
	return shared.b
}

// CloseShared ends the shared browser, if one was started.
func CloseShared() {
	if shared.b != nil {
		shared.b.Close()
	}
}

// Run runs m's tests, then ends the shared browser: a TestMain is
// os.Exit(browser.Run(m)).
func Run(m *testing.M) int {
	defer CloseShared()
	return m.Run()
}

// Options are a page's viewport and environment.
type Options struct {
	Width, Height int
	// Mobile emulates a phone: a mobile viewport and touch input.
	Mobile bool
	// TimeZone overrides the zone the page's scripts see (an IANA name):
	// what a person's browser would be set to. "": the machine's.
	TimeZone string
	// DownloadDir receives the page's downloads. "": downloads are denied.
	DownloadDir string
}

// Page is a tab in a browser context of its own.
type Page struct {
	b       *Browser
	t       testing.TB
	mobile  bool
	session string
	target  string
	context string
	events  chan event

	mu       sync.Mutex
	errors   []string // exceptions and console errors, CSP violations included
	download chan string
}

// NewPage opens a page of o's size in a fresh browser context; it is
// closed when t ends.
func (b *Browser) NewPage(t testing.TB, o Options) *Page {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Slack(30*time.Second))
	defer cancel()
	must := func(raw json.RawMessage, err error) json.RawMessage {
		t.Helper()
		if err != nil {
			t.Fatalf("browser: %v", err)
		}
		return raw
	}
	var bc struct{ BrowserContextID string }
	json.Unmarshal(must(b.call(ctx, "", "Target.createBrowserContext", map[string]any{"disposeOnDetach": true})), &bc)
	var tg struct{ TargetID string }
	json.Unmarshal(must(b.call(ctx, "", "Target.createTarget", map[string]any{"url": "about:blank", "browserContextId": bc.BrowserContextID,
		"width": o.Width, "height": o.Height})), &tg)
	var at struct{ SessionID string }
	json.Unmarshal(must(b.call(ctx, "", "Target.attachToTarget", map[string]any{"targetId": tg.TargetID, "flatten": true})), &at)
	p := &Page{b: b, t: t, mobile: o.Mobile, session: at.SessionID, target: tg.TargetID, context: bc.BrowserContextID, download: make(chan string, 4)}
	p.events = b.subscribe(p.session)
	go p.watch()
	for _, c := range []struct {
		method string
		params any
	}{
		{"Page.enable", nil},
		{"Runtime.enable", nil},
		{"Log.enable", nil},
		{"Emulation.setDeviceMetricsOverride", map[string]any{"width": o.Width, "height": o.Height, "deviceScaleFactor": 1, "mobile": o.Mobile}},
	} {
		must(b.call(ctx, p.session, c.method, c.params))
	}
	if o.Mobile {
		must(b.call(ctx, p.session, "Emulation.setTouchEmulationEnabled", map[string]any{"enabled": true, "maxTouchPoints": 5}))
		must(b.call(ctx, p.session, "Emulation.setEmitTouchEventsForMouse", map[string]any{"enabled": true, "configuration": "mobile"}))
	}
	if o.TimeZone != "" {
		must(b.call(ctx, p.session, "Emulation.setTimezoneOverride", map[string]any{"timezoneId": o.TimeZone}))
	}
	if o.DownloadDir != "" {
		must(b.call(ctx, "", "Browser.setDownloadBehavior", map[string]any{"behavior": "allowAndName", "browserContextId": bc.BrowserContextID,
			"downloadPath": o.DownloadDir, "eventsEnabled": true}))
		bev := b.subscribe("")
		go func() {
			// The browser's download events are of every context: this
			// page's are those its frame began (a page's main frame has
			// its target's id).
			mine := map[string]bool{}
			for e := range bev {
				var d struct{ GUID, State, FrameID string }
				json.Unmarshal(e.Params, &d)
				switch {
				case e.Method == "Browser.downloadWillBegin" && d.FrameID == p.target:
					mine[d.GUID] = true
				case e.Method == "Browser.downloadProgress" && d.State == "completed" && mine[d.GUID]:
					select {
					case p.download <- d.GUID:
					default:
					}
				}
			}
		}()
		t.Cleanup(func() { b.unsubscribeChan("", bev) })
	}
	t.Cleanup(p.close)
	return p
}

func (b *Browser) unsubscribeChan(session string, ch chan event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	subs := b.subs[session]
	for i, c := range subs {
		if c == ch {
			b.subs[session] = append(subs[:i:i], subs[i+1:]...)
			close(ch)
			return
		}
	}
}

// watch keeps the page's exceptions and console errors.
func (p *Page) watch() {
	for e := range p.events {
		var msg string
		switch e.Method {
		case "Runtime.exceptionThrown":
			var x struct {
				ExceptionDetails struct {
					Text      string
					Exception struct{ Description string }
				}
			}
			json.Unmarshal(e.Params, &x)
			msg = "exception: " + x.ExceptionDetails.Text + " " + x.ExceptionDetails.Exception.Description
		case "Log.entryAdded":
			var x struct {
				Entry struct{ Level, Source, Text string }
			}
			json.Unmarshal(e.Params, &x)
			// A response's status is the server's answer, which the test
			// checks itself; everything else logged as an error (a CSP
			// violation, a failed script) is the page's.
			if x.Entry.Level == "error" && x.Entry.Source != "network" {
				msg = x.Entry.Source + ": " + x.Entry.Text
			}
		case "Runtime.consoleAPICalled":
			var x struct {
				Type string
				Args []struct{ Value any }
			}
			json.Unmarshal(e.Params, &x)
			if x.Type == "error" {
				msg = fmt.Sprint("console.error: ", x.Args)
			}
		}
		if msg != "" {
			p.mu.Lock()
			p.errors = append(p.errors, msg)
			p.mu.Unlock()
		}
	}
}

// Errors returns the exceptions and console errors (CSP violations among
// them) the page had so far; failed responses are not among them.
func (p *Page) Errors() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.errors...)
}

func (p *Page) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p.b.call(ctx, "", "Target.closeTarget", map[string]any{"targetId": p.target})
	p.b.call(ctx, "", "Target.disposeBrowserContext", map[string]any{"browserContextId": p.context})
	p.b.unsubscribe(p.session)
}

// Call sends a DevTools command to the page and decodes its result into
// out (which may be nil).
func (p *Page) Call(method string, params, out any) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Slack(60*time.Second))
	defer cancel()
	raw, err := p.b.call(ctx, p.session, method, params)
	if err != nil {
		p.t.Fatalf("%v", err)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			p.t.Fatalf("browser: %s: %v in %s", method, err, raw)
		}
	}
}

// Navigate opens url and waits for its load event.
func (p *Page) Navigate(url string) {
	p.t.Helper()
	var r struct{ ErrorText string }
	p.Call("Page.navigate", map[string]any{"url": url}, &r)
	if r.ErrorText != "" {
		p.t.Fatalf("browser: navigate to %s: %s", url, r.ErrorText)
	}
}

// Eval evaluates a JavaScript expression in the page (awaiting a promise)
// and decodes its value into out (which may be nil).
func (p *Page) Eval(expr string, out any) {
	p.t.Helper()
	if err := p.eval(expr, out); err != nil {
		p.t.Fatalf("%v", err)
	}
}

func (p *Page) eval(expr string, out any) error {
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Slack(60*time.Second))
	defer cancel()
	raw, err := p.b.call(ctx, p.session, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true})
	if err != nil {
		return err
	}
	var r struct {
		Result struct {
			Value json.RawMessage
		}
		ExceptionDetails *struct {
			Text      string
			Exception struct{ Description string }
		}
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return err
	}
	if r.ExceptionDetails != nil {
		return fmt.Errorf("browser: evaluating %.200q: %s %s", expr, r.ExceptionDetails.Text, r.ExceptionDetails.Exception.Description)
	}
	if out != nil && len(r.Result.Value) > 0 {
		return json.Unmarshal(r.Result.Value, out)
	}
	return nil
}

// WaitFor polls the expression until it is true, failing after within,
// stretched by the machine's pace (testkit.Slack), with what it waited for
// and the page's errors.
func (p *Page) WaitFor(within time.Duration, what, expr string) {
	p.t.Helper()
	within = testkit.Slack(within)
	deadline := time.Now().Add(within)
	for {
		var ok bool
		err := p.eval("!!("+expr+")", &ok)
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			var body string
			p.eval("document.body ? document.body.innerText.slice(0, 2000) : ''", &body)
			p.t.Fatalf("browser: no %s within %v (%v); page errors %q; page text:\n%s", what, within, err, p.Errors(), body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Screenshot returns a PNG of the viewport.
func (p *Page) Screenshot() []byte {
	p.t.Helper()
	var r struct{ Data string }
	p.Call("Page.captureScreenshot", map[string]any{"format": "png"}, &r)
	png, err := base64.StdEncoding.DecodeString(r.Data)
	if err != nil {
		p.t.Fatalf("browser: screenshot: %v", err)
	}
	return png
}

// Tap touches the page at (x, y), CSS pixels from the viewport's top left,
// as a finger does: touchstart then touchend (pointer events and a click
// follow, as on a phone).
func (p *Page) Tap(x, y float64) {
	p.t.Helper()
	pt := []map[string]any{{"x": x, "y": y, "radiusX": 4, "radiusY": 4, "force": 1, "id": 1}}
	p.Call("Input.dispatchTouchEvent", map[string]any{"type": "touchStart", "touchPoints": pt}, nil)
	p.Call("Input.dispatchTouchEvent", map[string]any{"type": "touchEnd", "touchPoints": []any{}}, nil)
}

// Click clicks the mouse at (x, y).
func (p *Page) Click(x, y float64) {
	p.t.Helper()
	for _, typ := range []string{"mouseMoved", "mousePressed", "mouseReleased"} {
		p.Call("Input.dispatchMouseEvent", map[string]any{"type": typ, "x": x, "y": y, "button": "left", "clickCount": 1}, nil)
	}
}

// ClickSelector clicks the middle of the first element matching the CSS
// selector, scrolled into view: with a finger (Tap) on a mobile page.
func (p *Page) ClickSelector(sel string) {
	p.t.Helper()
	var box struct{ X, Y float64 }
	p.Eval(fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (!e) throw new Error("no element " + %q);
		e.scrollIntoView({block: "center"}); const r = e.getBoundingClientRect(); return {x: r.x + r.width / 2, y: r.y + r.height / 2}; })()`, sel, sel), &box)
	if p.mobile {
		p.Tap(box.X, box.Y)
		return
	}
	p.Click(box.X, box.Y)
}

// Key presses a key ("ArrowRight", "Enter", "Tab") on the focused element.
func (p *Page) Key(key string) {
	p.t.Helper()
	code := map[string]int{"ArrowLeft": 37, "ArrowRight": 39, "ArrowUp": 38, "ArrowDown": 40, "Enter": 13, "Tab": 9, "Home": 36, "End": 35}[key]
	for _, typ := range []string{"keyDown", "keyUp"} {
		p.Call("Input.dispatchKeyEvent", map[string]any{"type": typ, "key": key, "code": key, "windowsVirtualKeyCode": code}, nil)
	}
}

// Download waits for a download of the page to complete, within the
// given time stretched by the machine's pace, and returns the file's path
// in the Options' DownloadDir.
func (p *Page) Download(dir string, within time.Duration) string {
	p.t.Helper()
	select {
	case guid := <-p.download:
		return strings.TrimRight(dir, "/") + "/" + guid
	case <-time.After(testkit.Slack(within)):
		p.t.Fatalf("browser: no download completed within %v; page errors %q", testkit.Slack(within), p.Errors())
	}
	return ""
}
