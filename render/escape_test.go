package render_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spiderpool/spiderpool/fetch"
	"github.com/spiderpool/spiderpool/render"
)

// The tests here check what a page reaches beyond the requests the
// node's fetcher makes for it: the connections a browser opens on its
// own, the state of the renders before it. TestOneBrowser runs them.

// webrtcPage gathers ICE candidates from a STUN server at udpAddr and a
// TURN server over TCP at tcpAddr, keeping the render's network busy
// (a request every 200ms) until gathering ends, then reports it.
const webrtcPage = `<!doctype html><html><body><p id="out">started</p><script>
const pc = new RTCPeerConnection({iceServers: [
  {urls: "stun:%s"},
  {urls: "turn:%s?transport=tcp", username: "u", credential: "p"},
]});
pc.createDataChannel("x");
let done = false;
const finish = why => {
  if (done) return;
  done = true;
  out.textContent = "gathering " + why;
  fetch("/done");
};
pc.onicegatheringstatechange = () => { if (pc.iceGatheringState === "complete") finish("complete"); };
setTimeout(() => finish("timed out"), 6000);
const tick = () => { if (!done) fetch("/tick").then(() => setTimeout(tick, 200)); };
tick();
pc.createOffer().then(o => pc.setLocalDescription(o));
</script></body></html>`

func webRTCReachesNoAddress(t *testing.T, b *render.Browser) {
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { udp.Close() })
	var packets atomic.Int64
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := udp.ReadFrom(buf); err != nil {
				return
			}
			packets.Add(1)
		}
	}()
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tcp.Close() })
	var conns atomic.Int64
	go func() {
		for {
			c, err := tcp.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			c.Close()
		}
	}()

	var done atomic.Int64
	page := fmt.Sprintf(webrtcPage, udp.LocalAddr(), tcp.Addr())
	site := serveOn127002(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/":
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, page)
		case "/done":
			done.Add(1)
		}
	}))
	r := b.Get(context.Background(), site+"/", renderOptions(&fetch.Render{NetworkIdle: true, IdleCap: 10 * time.Second, Timeout: 20 * time.Second}))
	if r.Err != nil {
		t.Fatalf("render: %v", r.Err)
	}
	if done.Load() != 1 || !strings.Contains(string(r.Body), "gathering ") {
		t.Fatalf("the page did not finish gathering candidates (/done hit %d times): %s", done.Load(), r.Body)
	}
	if n, c := packets.Load(), conns.Load(); n != 0 || c != 0 {
		t.Errorf("WebRTC reached a forbidden address: %d UDP packets, %d TCP connections", n, c)
	}
}

func rendersShareNoState(t *testing.T, b *render.Browser) {
	site := serveOn127002(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		switch r.URL.Path {
		case "/set":
			w.Header().Set("Set-Cookie", "served=1; Max-Age=3600")
			fmt.Fprint(w, `<html><body><script>localStorage.setItem("k", "stored"); document.cookie = "scripted=1; max-age=3600";</script></body></html>`)
		case "/get":
			fmt.Fprint(w, `<html><body><p id="out"></p><script>out.textContent = "storage=" + localStorage.getItem("k") + " cookies=" + document.cookie;</script></body></html>`)
		}
	}))
	o := renderOptions(&fetch.Render{Timeout: 20 * time.Second})
	if r := b.Get(context.Background(), site+"/set", o); r.Err != nil {
		t.Fatalf("render /set: %v", r.Err)
	}
	r := b.Get(context.Background(), site+"/get", o)
	if r.Err != nil {
		t.Fatalf("render /get: %v", r.Err)
	}
	if want := `<p id="out">storage=null cookies=</p>`; !strings.Contains(string(r.Body), want) {
		t.Errorf("the second render saw the first's state; want %s in\n%s", want, r.Body)
	}
}

func crossSiteFramesRequestsGoThroughTheFetcher(t *testing.T, b *render.Browser) {
	var fromFrame atomic.Int64
	frameSite := serveOn(t, "127.0.0.3", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/frame":
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, `<html><body><script>fetch("/from-frame")</script></body></html>`)
		case "/from-frame":
			fromFrame.Add(1)
		}
	}))
	site := serveOn127002(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<html><body><iframe src="%s/frame"></iframe></body></html>`, frameSite)
	}))
	r := b.Get(context.Background(), site+"/", renderOptions(&fetch.Render{NetworkIdle: true, IdleCap: 10 * time.Second, Timeout: 20 * time.Second}))
	if r.Err != nil {
		t.Fatalf("render: %v", r.Err)
	}
	var urls []string
	for _, res := range r.Rendered.Resources {
		urls = append(urls, res.URL)
	}
	if got, want := strings.Join(urls, " "), frameSite+"/frame "+frameSite+"/from-frame"; got != want {
		t.Errorf("resources: %s, want %s", got, want)
	}
	if n := fromFrame.Load(); n != 1 {
		t.Errorf("the frame's request reached its host %d times, want once", n)
	}
}
